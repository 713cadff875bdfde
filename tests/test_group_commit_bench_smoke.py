"""bench/bench_group_commit.py runs end to end at a small scale: its ratio and its figures are computed."""
import pytest


@pytest.mark.timeout(300)
def test_group_commit_benchmarks_small_scale(bench_run, tmp_path):
    benchmarks, rows = bench_run("bench_group_commit", timeout=280)
    assert len(rows) == 1 and rows[0]["ratio"] is not None and rows[0]["ratio"] > 0
    for clients in (1, 4, 16, 32):
        figures = benchmarks[f"test_group_commit_appenders[{clients}]"]["extra_info"]["figures"]
        assert figures["cpu_us_per_append"] > 0
        assert 1 <= figures["appends_per_fsync"] <= clients  # one outstanding append per thread
    from bench import bench_group_commit
    plots = bench_group_commit.plot(benchmarks, tmp_path)
    assert plots and plots[0].stat().st_size > 0
