"""bench/bench_raft.py runs end to end at a small scale: both ratios are computed (the etcd one when
etcd is installed) and the failover figures are recorded."""
import shutil

import pytest


@pytest.mark.timeout(400)
def test_raft_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_raft", timeout=380, max_time=None)
    by = {r["name"]: r for r in rows}
    single = next(r for n, r in by.items() if "single-node" in n)
    assert single["ratio"] is not None and single["ratio"] > 0
    if shutil.which("etcd"):
        etcd = next(r for n, r in by.items() if "etcd" in n)
        assert etcd["ratio"] is not None and etcd["ratio"] > 0
    fig = benchmarks["test_failover_sigkill_leader_to_first_append"]["extra_info"]["figures"]
    assert fig["rounds"] >= 3 and 0 < fig["p50_s"] <= fig["p99_s"] < 30
    assert 0 <= fig["rounds_of_more_than_one_term"] <= fig["rounds"] and fig["terms_in_slowest_round"] >= 1
