"""Logtail: CN apply throughput, TN commit -> CN visible latency under load, snapshot reads with and
without the block index."""
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.conftest import SCALE
from bench.ratios import Ratio

RATIOS = [
    Ratio("CN snapshot read with the block index vs without", "test_cn_read_with_block_index",
          "test_cn_read_without_block_index", 1.0, 6),
]

COLS = {"id": "int64", "v": "int64", "w": "float64"}


def _insert_entries(nbatches, rows):
    from logtide.engine.logtail.logtail_format import BLOCK, INSERT, OFFSET, TS, Entry
    out = []
    for i in range(nbatches):
        rid = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        t = pa.table({BLOCK: rid // 8192 + 1, OFFSET: (rid % 8192).astype(np.int32),
                      TS: np.full(rows, i + 1, dtype=np.int64), "id": rid, "v": rid * 3, "w": rid * 0.5})
        out.append(Entry(INSERT, i + 1, t))
    return out


@pytest.mark.benchmark(group="logtail-apply")
def test_cn_apply_rows(benchmark, items, tmp_path):
    from logtide.engine.logtail.catalog import TableDef
    from logtide.engine.logtail.partition_state import BlockCache, PartitionState
    from logtide.engine.objectstore import ObjectStore
    tdef = TableDef.make("t", COLS, "id")
    entries = _insert_entries(max(4, int(200 * SCALE)), 1000)
    n = items(sum(e.rows for e in entries))
    cache = BlockCache(ObjectStore(tmp_path))

    def run():
        ps = PartitionState(tdef, cache)
        ps.apply(entries)
        return ps
    ps = benchmark(run)
    assert ps.applied_rows == n
    benchmark.extra_info["figures"] = {"cn_apply_rows_per_s": round(n / benchmark.stats.stats.min)}


@pytest.mark.benchmark(group="logtail-latency")
def test_commit_to_visible_latency(benchmark, items, tmp_path):
    from logtide.engine.logtail import ComputeNode, TransactionNode
    tn = TransactionNode.open(tmp_path)
    tn.create_table("t", COLS, "id")
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    cn.subscribe("t")
    stop = threading.Event()

    def load():     # background load: 500-row transactions on other keys
        k = 1 << 40
        while not stop.is_set():
            x = tn.begin()
            ids = np.arange(k, k + 500)
            x.insert("t", {"id": ids, "v": ids, "w": ids * 0.5})
            x.commit()
            k += 500

    th = threading.Thread(target=load)
    th.start()
    n = max(50, int(1000 * SCALE))
    lat, commit = [], []

    def run():
        lat.clear()
        commit.clear()
        for i in range(n):
            x = tn.begin()
            x.insert("t", {"id": [run.base + i], "v": [i], "w": [0.0]})
            t0 = time.perf_counter()
            ts = x.commit()
            t1 = time.perf_counter()
            cn.wait_for("t", ts)
            lat.append(time.perf_counter() - t0)
            commit.append(t1 - t0)
        run.base += n
    run.base = 0
    items(n)
    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        stop.set()
        th.join()
        cn.close()
        tn.close()
        tn.log.close()
    a = np.array(lat) * 1e3
    c = np.array(commit) * 1e3
    benchmark.extra_info["figures"] = {
        "commit_to_visible_p50_ms": round(float(np.percentile(a, 50)), 3),
        "commit_to_visible_p99_ms": round(float(np.percentile(a, 99)), 3),
        "commit_ack_p50_ms": round(float(np.percentile(c, 50)), 3),
        "commit_ack_p99_ms": round(float(np.percentile(c, 99)), 3)}


@pytest.fixture(scope="module")
def many_blocks():
    """A CN table of many small persisted blocks (a flush after every transaction), two of which
    have in-memory deletes, plus in-memory rows on newer blocks."""
    from logtide.engine.logtail import ComputeNode, TransactionNode
    d = Path(tempfile.mkdtemp(prefix="bench-logtail-"))
    tn = TransactionNode.open(d)
    tn.create_table("t", COLS, "id")
    nblocks, per = max(8, int(300 * SCALE)), 256
    for b in range(nblocks):
        ids = np.arange(b * per, (b + 1) * per)
        x = tn.begin()
        x.insert("t", {"id": ids, "v": ids, "w": ids * 0.5})
        x.commit()
        tn.flush()
    x = tn.begin()
    x.delete("t", [5, per * (nblocks // 2) + 7])
    x.commit()
    for i in range(50):
        x = tn.begin()
        ids = np.arange(10_000_000 + i * 400, 10_000_000 + (i + 1) * 400)
        x.insert("t", {"id": ids, "v": ids, "w": ids * 0.5})
        x.commit()
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    cn.subscribe("t")
    ts = tn.last_ts
    cn.wait_for("t", ts)
    ps = cn.states["t"]
    ps.read(ts)     # warm the block cache: both runs read decoded blocks from memory
    assert len(ps.blocks) == nblocks and len(ps.dirty) == 2
    yield ps, ts, nblocks * per - 2 + 50 * 400
    cn.close()
    tn.close()
    tn.log.close()
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.benchmark(group="logtail-read")
def test_cn_read_with_block_index(benchmark, items, many_blocks):
    ps, ts, rows = many_blocks
    items(rows)
    t = benchmark(ps.read, ts, True)
    assert t.num_rows == rows


@pytest.mark.benchmark(group="logtail-read")
def test_cn_read_without_block_index(benchmark, items, many_blocks):
    ps, ts, rows = many_blocks
    items(rows)
    t = benchmark(ps.read, ts, False)
    assert t.num_rows == rows
