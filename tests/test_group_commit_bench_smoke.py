"""bench/bench_group_commit.py runs end to end at a small scale: its ratio and its figures are computed."""
import os

import pytest


@pytest.mark.timeout(300)
def test_group_commit_benchmarks_small_scale(bench_run, tmp_path):
    benchmarks, rows = bench_run("bench_group_commit", timeout=280)
    one_cpu = len(os.sched_getaffinity(0)) > 1      # else the one-CPU runs are skipped
    assert len(rows) == 2 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows[:1 + one_cpu]), rows
    runs = [f"test_group_commit_appenders[{c}]" for c in (1, 4, 16, 32)]
    runs += [f"test_group_commit_one_cpu[{c}]" for c in (1, 32)] if one_cpu else []
    for name in runs:
        figures = benchmarks[name]["extra_info"]["figures"]
        clients = benchmarks[name]["extra_info"]["clients"]
        assert figures["cpu_us_per_append"] > 0 and figures["switches_per_append"] > 0
        assert 1 <= figures["appends_per_fsync"] <= clients  # one outstanding append per thread
    from bench import bench_group_commit
    plots = bench_group_commit.plot(benchmarks, tmp_path)
    assert plots and plots[0].stat().st_size > 0
