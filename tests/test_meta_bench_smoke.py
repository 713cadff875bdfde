"""bench/bench_meta.py runs end to end at a tiny scale (etcd's side runs too when it is installed)."""
import pytest


@pytest.mark.timeout(300)
def test_bench_meta_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_meta", timeout=280, max_time=None)
    assert {"test_meta_embedded_upsert", "test_meta_embedded_get", "test_meta_grpc_upsert", "test_meta_grpc_get",
            "test_meta_grpc_txn"} <= set(benchmarks)
