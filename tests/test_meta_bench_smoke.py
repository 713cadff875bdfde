"""bench/bench_meta.py runs end to end at a tiny scale (etcd's side runs too when it is installed)."""
import pytest


@pytest.mark.timeout(300)
def test_bench_meta_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_meta", timeout=280, max_time=None)
    assert {"test_meta_embedded_upsert", "test_meta_embedded_get"} <= set(benchmarks)
    for n in (1, 4, 16, 32):
        assert {f"test_meta_net_upsert[{n}]", f"test_meta_net_get[{n}]", f"test_meta_net_txn[{n}]"} <= set(benchmarks)
    figures = benchmarks["test_meta_net_upsert[16]"]["extra_info"]["figures"]
    assert figures["client_cpu_us_per_call"] > 0 and figures["server_cpu_us_per_call"] >= 0
