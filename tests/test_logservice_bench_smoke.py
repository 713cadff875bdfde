"""bench/bench_logservice.py runs end to end at a small scale and all of its ratios are computed."""
import pytest


@pytest.mark.timeout(300)
def test_logservice_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_logservice", timeout=280)
    assert len(rows) == 5 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    figures = benchmarks["test_read_batch_4k_inproc"]["extra_info"]["figures"]
    assert figures["MB_per_s"] > 0 and benchmarks["test_append_32_threads_fsync_always"]["extra_info"]["figures"]
