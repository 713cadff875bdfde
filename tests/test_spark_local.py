"""Spark on local[2]: partitioned replay (both plans, 1/2/7 partitions) byte-identical to
single-process replay, page ownership against mmh3, bad input, and the CLI. One SparkSession for
the module; every job is a real Spark job over real log segments and page stores."""
import os
import shutil

import mmh3
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

pyspark = pytest.importorskip("pyspark")
from logtide.spark.session import java_available  # noqa: E402

pytestmark = pytest.mark.skipif(not java_available(), reason="no Java runtime for Spark")

from logtide.spark.errors import ReplayInputError, SegmentCorruptError, SegmentMissingError  # noqa: E402
from logtide.spark.local_replay import replay_local  # noqa: E402
from logtide.spark.page_output import MANIFEST, read_manifest, read_page  # noqa: E402
from logtide.spark.page_owner import owners, spark_keys  # noqa: E402
from logtide.spark.wal_workload import expected_pages, write_workload  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    from logtide.spark import get_session
    s = get_session("local[2]", "logtide-tests-local", progress=False)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-local")


@pytest.fixture(scope="module")
def plain(work):
    """A log from LSN 1, no stored pages: multi-page updates, FPIs, hot pages, several segments."""
    return write_workload(work / "plain", 6000, seed=11, segment_size=150_000)


@pytest.fixture(scope="module")
def ckpt(work):
    """The same shape with a checkpoint: a page store as of LSN ~2500 plus the whole log."""
    return write_workload(work / "ckpt", 5000, seed=12, segment_size=150_000, checkpoint_at=2500)


def _same_pages(a: str, b: str) -> int:
    """Assert two committed outputs hold byte-identical pages; returns the page count."""
    ma, mb = read_manifest(a), read_manifest(b)
    assert ma["pages"] == mb["pages"] and ma["relations"].keys() == mb["relations"].keys()
    n = 0
    for name, rel in ma["relations"].items():
        assert rel == mb["relations"][name], name
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            assert fa.read() == fb.read(), name
        n += rel["pages"]
    return n


def _local(data_dir, target, work, name):
    out = work / f"local-{name}-{target}"
    if not out.exists():
        replay_local(data_dir, target, out)
    return str(out)


# ------------------------------------------------------------------ page ownership

@scaled(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 2**32 - 1)] * 5), min_size=1, max_size=50), st.integers(1, 64))
def test_page_owner_is_murmur3_mod_p(tags, p):
    arr = np.array(tags, np.uint32)
    want = [mmh3.hash64(np.array(t, "<u4").tobytes(), 0, signed=False)[0] % p for t in tags]
    assert owners(arr, p).tolist() == want


def test_spark_keys_land_in_their_partition(spark):
    """Spark's own hash partitioner puts key spark_keys(P)[p] in partition p (every shuffle-plan
    redo task also checks each row it receives against the owner function)."""
    from pyspark.sql import functions as F
    p = 13
    keys = spark_keys(p)
    df = spark.range(0, p, numPartitions=1).select(F.col("id").cast("int").alias("want"))
    df = df.withColumn("key", F.element_at(F.array(*[F.lit(int(k)) for k in keys]), F.col("want") + 1))
    got = df.repartition(p, "key").select("want", F.spark_partition_id().alias("pid")).collect()
    assert sorted((r.want, r.pid) for r in got) == [(i, i) for i in range(p)]


# ------------------------------------------------------------------ equality with single-process replay

def _targets(w):
    segs = sorted(int(n[:20]) for n in os.listdir(os.path.join(w.data_dir, "log")) if n.endswith(".log"))
    mid = w.mid_transaction_lsn()
    assert w.xids[mid] == w.xids[mid + 1]          # inside one transaction's run of records
    return {"mid_txn": mid, "segment_end": segs[len(segs) // 2] - 1, "last": w.last_lsn}


CASES = [("shuffle", 1, "mid_txn"), ("shuffle", 2, "segment_end"), ("shuffle", 7, "last"),
         ("pages", 7, "mid_txn"), ("pages", 1, "segment_end"), ("pages", 2, "last")]


@pytest.mark.parametrize("plan,partitions,which", CASES)
def test_replay_equals_single_process(spark, plain, work, plan, partitions, which):
    from logtide.spark import partitioned_replay
    target = _targets(plain)[which]
    out = work / f"out-{plan}-{partitions}-{which}"
    res = partitioned_replay(spark, plain.data_dir, target, out, partitions=partitions, plan=plan)
    assert (res.plan, res.partitions, res.target_lsn) == (plan, partitions, target)
    m = read_manifest(out)
    assert (m["target_lsn"], m["plan"], m["partitions"], m["pages"]) == (target, plan, partitions, res.pages)
    n = _same_pages(str(out), _local(plain.data_dir, target, work, "plain"))
    assert n == res.pages > 50
    assert res.applied > 0.9 * target      # nearly every block reference of the log was applied
    if which == "last":                    # and both equal the generator's own pages
        for tag, page in expected_pages(plain).items():
            assert read_page(out, tag) == page, tag
    assert not [p for p in os.listdir(work) if ".tmp-" in p]
    assert sorted(os.listdir(out)) == sorted([MANIFEST, *m["relations"]])     # no exchange files left
    if plan == "pages":
        # the WAL meta was scanned once per job, not once per partition: the scan stage's rows are
        # the log's block references up to the target, counted here from the segments themselves
        from logtide.spark.log_segments import block_refs, list_log_segments, scan_segment
        refs = sum(len(block_refs(scan_segment(s), target)["lsn"])
                   for s in list_log_segments(os.path.join(plain.data_dir, "log")) if s.first_lsn <= target)
        scan = [st for st in res.stages if st.name.startswith("scan")]
        assert len(scan) == 1 and scan[0].records == refs


@pytest.mark.parametrize("plan", ["shuffle", "pages"])
def test_replay_over_stored_pages(spark, ckpt, work, plan):
    """Stored pages as of a checkpoint plus the log: records at or below a page's LSN are skipped."""
    from logtide.spark import partitioned_replay
    for target, P in ((ckpt.checkpoint_lsn + 333, 2), (ckpt.last_lsn, 7)):
        out = work / f"ckpt-{plan}-{target}"
        res = partitioned_replay(spark, ckpt.data_dir, target, out, partitions=P, plan=plan)
        _same_pages(str(out), _local(ckpt.data_dir, target, work, "ckpt"))
        assert res.applied < target - ckpt.checkpoint_lsn + 400   # the checkpoint's prefix was skipped
    for tag, page in expected_pages(ckpt).items():
        assert read_page(out, tag) == page


def test_replay_of_a_primary_directory(spark, work):
    """A real Primary's directory: page store flushed at a checkpoint, LogIndex tables on disk, then
    a crash. The pages plan takes LSNs from the LogIndex; both plans equal single-process replay."""
    import random
    from logtide.engine.logservice import LogService
    from logtide.replay.primary import Primary
    from logtide.spark import partitioned_replay
    from logtide.spark.page_lsns import index_coverage
    d = work / "primary"
    log = LogService.open(d / "log", fsync="never", segment_size=120_000)
    p = Primary(d, log=log, checkpoint_interval=0, pool_pages=64, logindex_segments=64)
    rng = random.Random(5)
    rows = []                                   # (rel, tid) of live tuples
    for i in range(4000):
        rel = 16384 + i % 2
        r = rng.random()
        if r < 0.55 or not rows:
            rows.append((rel, p.insert(rel, rng.randbytes(rng.randint(30, 250)))))
        elif r < 0.9:                           # may move the tuple: one record on two pages
            k = rng.randrange(len(rows))
            rel, t = rows[k]
            rows[k] = (rel, p.update(rel, t, rng.randbytes(rng.randint(30, 400))))
        else:
            rel, t = rows.pop(rng.randrange(len(rows)))
            p.delete(rel, t)
        if i == 2000:
            p.checkpoint()
    consistent = p.consistent_lsn
    last = p.write_lsn
    p.crash()
    log.close()
    assert index_coverage(str(d / "logindex"), consistent + 1) > consistent     # the LogIndex covers part of the log
    # the truth: logtide.replay's own crash recovery of a copy of the directory
    from logtide._ext import page as pg
    shutil.copytree(d, work / "primary-recovered")
    q = Primary(work / "primary-recovered", checkpoint_interval=0, pool_pages=1 << 14)
    truth = {}
    for rel in (16384, 16385):
        for b in range(q.nblocks(rel)):
            page = bytearray(q.read_page((1663, 5, rel, 0, b))[0])
            pg.set_checksum(page, b)
            truth[(1663, 5, rel, 0, b)] = bytes(page)
    q.crash()
    assert len(truth) > 20
    for plan in ("pages", "shuffle"):
        out = work / f"primary-{plan}"
        partitioned_replay(spark, d, last, out, partitions=3, plan=plan)
        _same_pages(str(out), _local(d, last, work, "primary"))
        assert {t: read_page(out, t) for t in truth} == truth
    # a target below pages the checkpoint already stored is refused, and leaves nothing
    with pytest.raises(ReplayInputError, match="below the LSN"):
        partitioned_replay(spark, d, 10, work / "primary-early", partitions=2, plan="shuffle")
    assert not (work / "primary-early").exists()


# ------------------------------------------------------------------ bad input

def _copy(w, work, name):
    dst = work / name
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(w.data_dir, dst)
    return dst


def _segments(d):
    return sorted(n for n in os.listdir(d / "log") if n.endswith(".log"))


def _assert_nothing_complete(out):
    assert not out.exists()
    assert not [p for p in os.listdir(out.parent) if p.startswith(f".{out.name}.tmp-")]


@pytest.mark.parametrize("plan", ["shuffle", "pages"])
def test_missing_segment_names_segment_and_lsn(spark, plain, work, plan):
    from logtide.spark import partitioned_replay
    d = _copy(plain, work, f"missing-{plan}")
    segs = _segments(d)
    gone = segs[3]
    os.remove(d / "log" / gone)
    out = work / f"out-missing-{plan}"
    with pytest.raises(SegmentMissingError) as ei:
        partitioned_replay(spark, d, plain.last_lsn, out, partitions=2, plan=plan)
    assert segs[2] in str(ei.value) and f"LSN {int(gone[:20])}" in str(ei.value)
    _assert_nothing_complete(out)


def test_corrupt_frame_names_segment_and_lsn(spark, plain, work):
    from logtide._ext import wal
    from logtide.spark import partitioned_replay
    d = _copy(plain, work, "corrupt-frame")
    seg = _segments(d)[2]
    path = d / "log" / seg
    raw = bytearray(path.read_bytes())
    starts = wal.scan(bytes(raw), 0, int(seg[:20]))[0]
    k = len(starts) // 2
    raw[int(starts[k]) + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    out = work / "out-corrupt-frame"
    with pytest.raises(SegmentCorruptError) as ei:
        partitioned_replay(spark, d, plain.last_lsn, out, partitions=2, plan="shuffle")
    assert seg in str(ei.value) and f"LSN {int(seg[:20]) + k}" in str(ei.value)
    _assert_nothing_complete(out)


def test_corrupt_record_crc_names_segment_and_lsn(spark, plain, work):
    """The frame is intact (its CRC recomputed) but the WAL record's own CRC-32C fails."""
    import struct
    from logtide._ext import wal
    from logtide._ext.crc32c import crc32c
    from logtide.spark import partitioned_replay
    d = _copy(plain, work, "corrupt-record")
    seg = _segments(d)[1]
    path = d / "log" / seg
    raw = bytearray(path.read_bytes())
    starts, _, lengths, _, _ = wal.scan(bytes(raw), 0, int(seg[:20]))
    k = len(starts) // 3
    s, n = int(starts[k]), int(lengths[k])
    raw[s + 20 + n - 1] ^= 0x5A                       # last byte of the record's data
    crc = crc32c(bytes(raw[s + 8:s + 20 + n]), crc32c(bytes(raw[s:s + 4])))
    struct.pack_into("<I", raw, s + 4, crc)
    path.write_bytes(bytes(raw))
    assert wal.scan(bytes(raw), 0, int(seg[:20]))[4] == wal.OK
    # the record references blocks: the scan leaves its CRC to the redo, which checks it once
    for plan in ("shuffle", "pages", "local"):
        out = work / f"out-corrupt-record-{plan}"
        with pytest.raises(SegmentCorruptError) as ei:
            if plan == "local":
                replay_local(d, plain.last_lsn, out)
            else:
                partitioned_replay(spark, d, plain.last_lsn, out, partitions=2, plan=plan)
        assert seg in str(ei.value) and f"LSN {int(seg[:20]) + k}" in str(ei.value), str(ei.value)
        assert "checksum" in str(ei.value)           # PostgreSQL's words for a record CRC-32C mismatch
        _assert_nothing_complete(out)


def test_target_beyond_end_and_existing_out_dir(spark, plain, work):
    from logtide.spark import partitioned_replay
    out = work / "out-beyond"
    with pytest.raises(ReplayInputError) as ei:
        partitioned_replay(spark, plain.data_dir, plain.last_lsn + 5, out, partitions=2)
    assert f"target LSN {plain.last_lsn + 5}" in str(ei.value) and _segments(work / "plain")[-1] in str(ei.value)
    _assert_nothing_complete(out)
    done = work / "out-exists"
    done.mkdir()
    with pytest.raises(ReplayInputError, match="already exists"):
        partitioned_replay(spark, plain.data_dir, 100, done, partitions=2)
    assert os.listdir(done) == [] and not (done / MANIFEST).exists()


# ------------------------------------------------------------------ CLI (in process: reuses this session)

def test_cli_replay_prints_stage_summaries(spark, plain, work, capsys):
    from logtide.cli import main
    out = work / "cli-out"
    rc = main(["spark", "replay", "--dir", str(plain.data_dir), "--lsn", str(plain.last_lsn), "--out", str(out),
               "--partitions", "2", "--plan", "shuffle"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert read_manifest(out)["pages"] > 50
    assert "records/s" in text and "pages" in text
    rc = main(["spark", "replay", "--dir", str(plain.data_dir), "--lsn", str(plain.last_lsn + 1), "--out",
               str(work / "cli-bad")])
    err = capsys.readouterr().err          # errors go to stderr
    assert rc == 2 and "ReplayInputError" in err and "beyond the end" in err and err.count("\n") == 1


def test_start_python_workers_starts_one_per_core(spark):
    """The benchmark's and the demo's warm-up: Python workers with logtide imported, one per core
    of local[2], kept for the next jobs (spark.python.worker.reuse)."""
    from logtide.spark.session import start_python_workers
    assert start_python_workers(spark, 2) == 2
