"""Spark on local-cluster[2,1,1024]: two executor JVMs, each with its own Python workers started in
the executor's work directory, so every job here proves the executors import the installed,
compiled logtide. The WAL source against pg_waldump on a real PostgreSQL 15 WAL, the changed-page
map, the pages source, and table snapshots against a CN at many ts. One session for the module."""
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
from logtide.spark.session import java_available  # noqa: E402

pytestmark = [pytest.mark.skipif(not java_available(), reason="no Java runtime for Spark"),
              pytest.mark.timeout(300)]

from logtide.logindex.pgcluster import PG_BIN, make_pgbench_wal, pg_available  # noqa: E402
from logtide.spark.errors import SnapshotRangeError  # noqa: E402
from logtide.spark.local_replay import replay_local  # noqa: E402
from logtide.spark.page_output import read_manifest, read_page  # noqa: E402
from logtide.spark.wal_workload import expected_pages, write_workload  # noqa: E402
from waldump_end import waldump_end_lsn  # noqa: E402

PG_REASON = pg_available()


@pytest.fixture(scope="module")
def spark():
    from logtide.spark import get_session, register
    s = get_session("local-cluster[2,1,1024]", "logtide-tests-cluster", progress=False,
                    conf={"spark.executor.memory": "768m"})
    register(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-cluster")


@pytest.fixture(scope="module")
def wl(work):
    return write_workload(work / "wl", 2500, seed=21, segment_size=80_000)


def test_executors_import_the_installed_extension(spark):
    import logtide
    site = os.path.dirname(os.path.dirname(os.path.realpath(logtide.__file__)))

    def probe(batches):
        import pyarrow as pa
        import logtide._ext.located_redo as m
        for _ in batches:
            yield pa.RecordBatch.from_pydict({"file": [os.path.realpath(m.__file__)], "cwd": [os.getcwd()],
                                              "pid": [os.getppid()]})

    rows = spark.range(0, 8, numPartitions=8).mapInArrow(probe, "file string, cwd string, pid long").collect()
    assert {os.path.dirname(os.path.dirname(os.path.dirname(r.file))) for r in rows} == {site}
    assert all(r.file.endswith(".so") for r in rows)
    # the Python workers run in the executors' work directories, not in the driver's
    cwds = {r.cwd for r in rows}
    assert os.getcwd() not in cwds and all("app-" in c for c in cwds), cwds
    assert len({r.pid for r in rows}) == 2          # two executor JVMs ran them


def test_wal_source_on_a_logtide_log(spark, wl):
    from logtide._ext import redo
    from logtide.spark.log_segments import list_log_segments, scan_segment
    df = spark.read.format("logtide.wal").load(os.path.join(wl.data_dir, "log"))
    assert df.rdd.getNumPartitions() == len(list_log_segments(os.path.join(wl.data_dir, "log")))
    got = df.orderBy("lsn", "spc", "db", "rel", "fork", "block").toArrow().to_pydict()
    want = []
    for seg in list_log_segments(os.path.join(wl.data_dir, "log")):
        s = scan_segment(seg)
        for k in range(len(s.starts)):
            rec = bytes(memoryview(s.buf)[int(s.starts[k]) + 32:int(s.starts[k]) + 20 + int(s.lengths[k])])
            d = redo.decode(rec)
            for b in sorted(d["blocks"], key=lambda b: b["tag"]):
                want.append((seg.first_lsn + k, d["xid"], d["rmid"], d["info"], *b["tag"], b["image"] is not None,
                             d["tot_len"]))
    cols = ["lsn", "xid", "rmid", "info", "spc", "db", "rel", "fork", "block", "has_image", "record_len"]
    assert list(zip(*(got[c] for c in cols))) == want
    assert sum(w[-2] for w in want) > 20 and len(want) > len({w[0] for w in want})   # FPIs, multi-page records


@pytest.fixture(scope="module")
def pg_wal():
    if PG_REASON:
        pytest.skip(PG_REASON)
    d = Path(tempfile.mkdtemp(prefix="logtide-spark-pg-", dir="/tmp"))
    try:
        yield make_pgbench_wal(d, scale=1, seconds=3, wal_segsize_mb=1, wal_keep_mb=64)  # many segments
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def waldump(pg_wal):
    from logtide.spark.pg_segments import list_pg_segments
    from logtide.spark.pg_waldump import waldump_records
    segs = list_pg_segments(str(pg_wal))
    recs, err = waldump_records(PG_BIN, pg_wal, os.path.basename(segs[0].path), os.path.basename(segs[-1].path))
    assert waldump_end_lsn(err, segs[0].seg_size) is not None, err   # pg_waldump read to the end of the WAL
    assert len(recs) > 10_000, err
    return recs


def test_wal_source_matches_pg_waldump(spark, pg_wal, waldump):
    df = spark.read.format("logtide.wal").option("format", "postgres").load(str(pg_wal))
    t = df.toArrow().to_pydict()
    ours: dict = {}
    for i, lsn in enumerate(t["lsn"]):
        rmid, tot, xid, blocks = ours.setdefault(lsn, (t["rmid"][i], t["record_len"][i], t["xid"][i], []))
        assert (rmid, tot, xid) == (t["rmid"][i], t["record_len"][i], t["xid"][i])
        if t["block"][i] is not None:
            blocks.append(((t["spc"][i], t["db"][i], t["rel"][i], t["fork"][i], t["block"][i]), t["has_image"][i]))
    assert ours.keys() == waldump.keys()               # record for record
    for lsn, (rmid, tot, xid, blocks) in waldump.items():
        o = ours[lsn]
        assert (o[0], o[1], o[2]) == (rmid, tot, xid), lsn
        assert sorted(o[3]) == sorted(blocks), lsn     # block ref for block ref, FPW flags too
    # records that cross a segment boundary were completed by the segment they start in
    seg = 1 << 20
    assert df.rdd.getNumPartitions() > 5                # one partition per segment file
    crossing = [lsn for lsn, v in waldump.items() if lsn // seg != (lsn + v[1] - 1) // seg]
    assert crossing and all(c in ours for c in crossing)
    assert sum(1 for v in waldump.values() for _, fpw in v[3] if fpw) > 10


def test_pg_changed_pages_matches_waldump_map(spark, pg_wal, waldump, work, capsys):
    from logtide.spark import pg_changed_pages
    from logtide.spark.pg_waldump import changed_pages_map
    lsns = sorted(waldump)
    lo, hi = lsns[len(lsns) // 5], lsns[4 * len(lsns) // 5]
    got = {tuple(r[:5]): [r.first_lsn, r.last_lsn, r.records]
           for r in pg_changed_pages(spark, str(pg_wal), lo, hi).collect()}
    want = changed_pages_map(waldump, lo, hi)
    assert got == want and len(want) > 100
    # the CLI writes the same map as Parquet and prints one summary line
    from logtide.cli import main
    from logtide.logindex.pgwal import format_lsn
    out = work / "changed.parquet"
    assert main(["spark", "pg-changed-pages", "--pg-wal", str(pg_wal), "--from", format_lsn(lo), "--to", format_lsn(hi),
                 "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert f"pg-changed-pages: {sum(v[2] for v in want.values())} records, {len(want)} pages" in text
    back = spark.read.parquet(str(out)).collect()
    assert {tuple(r[:5]): [r.first_lsn, r.last_lsn, r.records] for r in back} == want


def test_replay_and_pages_source_on_executors(spark, wl, work):
    from logtide.spark import partitioned_replay
    target = wl.mid_transaction_lsn()
    ref = work / "local-ref"
    replay_local(wl.data_dir, wl.last_lsn, ref)
    for plan in ("shuffle", "pages"):
        out = work / f"cluster-{plan}"
        res = partitioned_replay(spark, wl.data_dir, wl.last_lsn, out, partitions=3, plan=plan)
        assert res.pages == read_manifest(ref)["pages"]
        for tag, page in expected_pages(wl).items():
            assert read_page(out, tag) == page == read_page(ref, tag)
    # logtide.pages at a mid-transaction LSN equals single-process replay at that LSN
    ref_mid = work / "local-mid"
    replay_local(wl.data_dir, target, ref_mid)
    rows = spark.read.format("logtide.pages").option("lsn", target).option("partitions", 3).load(wl.data_dir)
    got = {(r.spc, r.db, r.rel, r.fork, r.block): (r.page_lsn, bytes(r.page)) for r in rows.collect()}
    assert len(got) == read_manifest(ref_mid)["pages"]
    for tag, (lsn, page) in got.items():
        assert page == read_page(ref_mid, tag) and 0 < lsn <= target


# ------------------------------------------------------------------ table snapshots

COLS = {"id": "int64", "qty": "int32", "price": "float64", "flag": "bool"}


def _txns(tn, ref, rng, n, keys, flush_every):
    stamps = []
    live = set(ref.at(1 << 62))
    for i in range(n):
        x = tn.begin()
        new, upd, dels, touched = [], [], [], set()
        for _ in range(rng.randint(1, 10)):
            pk = rng.randrange(keys)
            if pk in touched:
                continue
            touched.add(pk)
            row = {"id": pk, "qty": rng.randrange(-999, 999), "price": rng.random(), "flag": rng.random() < 0.5}
            if pk not in live:
                new.append(row)
            elif rng.random() < 0.35:
                dels.append(pk)
            else:
                upd.append(row)
        if new:
            x.insert("t", {c: [r[c] for r in new] for c in COLS})
        if upd:
            x.update("t", {c: [r[c] for r in upd] for c in COLS})
        if dels:
            x.delete("t", dels)
        ts = x.commit()
        ref.commit(ts, new + upd, dels)
        live |= {r["id"] for r in new}
        live -= set(dels)
        stamps.append(ts)
        if flush_every and i % flush_every == flush_every - 1:
            tn.flush()
            stamps.append(tn.last_ts)
    return stamps


def test_table_snapshot_equals_cn_read(spark, work):
    from logtide.engine.logservice import LogService
    from logtide.engine.logtail import ComputeNode, ReferenceModel, TransactionNode
    from logtide.engine.objectstore import ObjectStore
    from logtide.spark import table_snapshot
    d = work / "tn"
    log = LogService.open(d / "log", fsync="never", segment_size=8192, truncation_interval=0.05)
    tn = TransactionNode(log, ObjectStore(d / "objects"), page_size=16)
    try:
        tn.create_table("t", COLS, "id")
        ref = ReferenceModel(list(COLS), "id")
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store, "cn")
        cn.subscribe("t")
        rng = random.Random(8)
        old = _txns(tn, ref, rng, 60, 200, flush_every=17)
        tn.checkpoint_now()
        old += _txns(tn, ref, rng, 40, 200, flush_every=13)
        ckp = tn.checkpoint_now()
        deadline = time.monotonic() + 30
        while log.get_first_lsn() <= 1 and time.monotonic() < deadline:   # truncation removes old segments
            time.sleep(0.05)
        assert log.get_first_lsn() > 1
        new = [ckp.ts] + _txns(tn, ref, rng, 50, 200, flush_every=11)
        # deletes of rows that live only in objects (flushed), then a last flush and more commits
        flushed = [pk for pk in ref.at(tn.last_ts)][:15]
        x = tn.begin()
        x.delete("t", flushed)
        new.append(x.commit())
        ref.commit(new[-1], [], flushed)
        tn.flush()
        new.append(tn.last_ts)
        new += _txns(tn, ref, rng, 10, 200, flush_every=0)
        cn.wait_for("t", new[-1])
        picks = sorted(set(new[:1] + new[-2:] + rng.sample(new, 2)))
        for ts in picks:
            want = ReferenceModel.rows_of(cn.read("t", ts), "id")
            assert want == ref.at(ts)
            got = table_snapshot(spark, d, "t", ts).toArrow()
            assert ReferenceModel.rows_of(got, "id") == want, ts
        src = spark.read.format("logtide.table").option("table", "t").option("ts", new[-1]).load(str(d))
        assert ReferenceModel.rows_of(src.toArrow(), "id") == ReferenceModel.rows_of(cn.read("t", new[-1]), "id")
        from logtide.cli import main
        assert main(["spark", "snapshot", "--tn-dir", str(d), "--table", "t", "--ts", str(new[-1]), "--out",
                     str(work / "snap.parquet"), "--no-progress"]) == 0
        back = spark.read.parquet(str(work / "snap.parquet")).toArrow()
        assert ReferenceModel.rows_of(back, "id") == ref.at(new[-1])
        assert main(["spark", "snapshot", "--tn-dir", str(d), "--table", "t", "--ts", str(old[3]), "--out",
                     str(work / "snap-old.parquet"), "--no-progress"]) == 2
        # a ts whose checkpoint's log suffix was truncated away is refused, clearly
        with pytest.raises(SnapshotRangeError, match="below the retained history"):
            table_snapshot(spark, d, "t", old[len(old) // 2])
        cn.close()
    finally:
        tn.close()
        log.close()
