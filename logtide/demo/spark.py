"""Demo stage: partitioned page replay on Spark (local[2]), checked byte for byte against
single-process replay, with the throughput of both and Spark's start-up reported apart.

The single-process side is the fastest one-process path: the same pages plan without Spark
(replay_local). The log is large enough (1M records) that a job's fixed cost is not the whole story."""
from __future__ import annotations

import time
from pathlib import Path

ORDER = 90
NAME = "spark"
TITLE = "Spark: partitioned page replay (shuffle and pages plans) vs single-process replay"

RECORDS = 1_000_000


def _same(a: Path, b: Path) -> tuple[int, int]:
    """(pages compared, pages that differ) between two committed page-store outputs."""
    from logtide.spark.page_output import read_manifest
    ma, mb = read_manifest(a), read_manifest(b)
    bad = 0 if ma["relations"].keys() == mb["relations"].keys() else 1
    for name in ma["relations"]:
        if name in mb["relations"] and (a / name).read_bytes() != (b / name).read_bytes():
            bad += ma["relations"][name]["pages"]
    return ma["pages"], bad


def run(workdir: Path) -> bool:
    from logtide.spark.session import java_available
    if not java_available():
        from logtide.spark.session import JAVA_HINT
        print(f"skipped: {JAVA_HINT}")
        return True
    from logtide.spark import get_session, partitioned_replay
    from logtide.spark.local_replay import replay_local
    from logtide.spark.wal_workload import write_workload
    workdir = Path(workdir)
    t0 = time.perf_counter()
    last_shown = [0.0]

    def progress(n):
        if time.perf_counter() - last_shown[0] > 2:
            last_shown[0] = time.perf_counter()
            print(f"  generating WAL: {n:,} / {RECORDS:,} records", flush=True)
    w = write_workload(workdir / "data", RECORDS, seed=42, segment_size=4 << 20, checkpoint_at=RECORDS // 3,
                       rels=tuple(range(16384, 16392)), blocks_per_rel=1000, progress=progress)
    print(f"workload: {w.last_lsn:,} WAL records (heap insert/update/delete, multi-page updates, full-page "
          f"images) over {len(w.pages):,} pages, page store checkpointed at LSN {w.checkpoint_lsn:,}, "
          f"{time.perf_counter() - t0:.1f}s")
    ref = replay_local(w.data_dir, w.last_lsn, workdir / "single")
    local_rate = ref["records"] / ref["seconds"]
    print(f"single-process replay (the pages plan in this process, no Spark): {ref['records']:,} records -> "
          f"{ref['pages']:,} pages in {ref['seconds']:.2f}s ({local_rate:,.0f} records/s)")
    t0 = time.perf_counter()
    from logtide.spark.session import start_python_workers
    spark = get_session("local[2]", "logtide-demo", progress=False)
    start_python_workers(spark, 2)
    print(f"Spark start-up (local[2], executors' Python workers): {time.perf_counter() - t0:.1f}s")
    ok = True
    for plan in ("pages", "shuffle"):
        out = workdir / f"spark-{plan}"
        res = partitioned_replay(spark, w.data_dir, w.last_lsn, out, partitions=2, plan=plan)
        n, bad = _same(out, workdir / "single")
        rate = res.records / res.seconds
        print(f"spark {plan:7s} plan, 2 partitions: {res.pages:,} pages in {res.seconds:.2f}s "
              f"({rate:,.0f} records/s, {rate / local_rate:.2f}x the same plan in one process); "
              f"{n - bad:,} of {n:,} pages byte-identical")
        ok &= bad == 0 and n == ref["pages"]
    # the replay stage's shared directory (when that stage ran first): its pages at its final LSN
    prev = workdir.parent / "replay" / "replay"
    if (prev / "log").is_dir():
        from logtide.spark.log_segments import list_log_segments, scan_segment
        last = scan_segment(list_log_segments(str(prev / "log"))[-1], verify=False).last_lsn
        replay_local(prev, last, workdir / "replay-stage-single")
        partitioned_replay(spark, prev, last, workdir / "replay-stage-spark", partitions=2, plan="shuffle")
        n, bad = _same(workdir / "replay-stage-spark", workdir / "replay-stage-single")
        print(f"replay stage's directory at LSN {last:,}: {n - bad:,} of {n:,} pages byte-identical")
        ok &= bad == 0
    spark.stop()
    return ok
