"""The LogIndex and PostgreSQL WAL benchmarks run end to end at a small scale, and every ratio is computed."""
import pytest


@pytest.mark.timeout(600)
def test_logindex_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_logindex", "bench_pgwal", timeout=580)
    measured = [r for r in rows if r["ratio"] is not None]
    assert len(measured) >= 6 and all(r["ratio"] > 0 for r in measured)
