"""bench/bench_meta_raft.py runs end to end at a small scale: the meta-service's 3-replica rates are
recorded, and the ratios against etcd are computed when etcd is installed."""
import shutil

import pytest


@pytest.mark.timeout(300)
def test_meta_raft_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_meta_raft", timeout=280, max_time=None)
    for name in ("test_meta_raft_upsert", "test_meta_raft_get_linearizable", "test_meta_raft_get_stale"):
        info = benchmarks[name]["extra_info"]
        assert info["clients"] == 16 and info["rate"] > 0 and len(info["per_second"]) >= 2
    if shutil.which("etcd"):
        assert len(rows) == 3 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
