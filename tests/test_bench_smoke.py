"""The foundation's benchmarks run end to end at a small scale and their report computes every ratio."""
import pytest


@pytest.mark.timeout(900)
def test_bloom_and_murmur3_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_bloom4k", "bench_murmur3", timeout=900)
    assert len(rows) == 5 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
