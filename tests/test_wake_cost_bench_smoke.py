"""bench/bench_wake_cost.py runs end to end at a small scale: both placements, their figures and the ratio."""
import os

import pytest


@pytest.mark.timeout(120)
def test_wake_cost_benchmarks_small_scale(bench_run):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU available: nothing to compare")
    benchmarks, rows = bench_run("bench_wake_cost", timeout=100)
    assert len(rows) == 1 and rows[0]["ratio"] is not None and rows[0]["ratio"] > 0, rows
    for placement in ("one-cpu", "two-cpus"):
        figures = benchmarks[f"test_handover[{placement}]"]["extra_info"]["figures"]
        # each hand-over puts the handing thread to sleep until it is handed back
        assert figures["cpu_us_per_handover"] > 0 and figures["switches_per_handover"] >= 0.5, figures
