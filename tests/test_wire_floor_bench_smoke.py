"""bench/bench_wire_floor.py runs end to end at a small scale and its ratios are computed."""
import os

import pytest


@pytest.mark.timeout(300)
def test_wire_floor_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_wire_floor", timeout=280)
    placed = len(os.sched_getaffinity(0)) > 1     # else the runs in a placement of their own are skipped
    assert len(rows) == 5 and all(r["ratio"] is not None and r["ratio"] > 0
                                  for r in rows if placed or r["candidate"] != "test_append_wire_split_cpus"), rows
    for n in (1, 4, 16, 32):
        assert {f"test_append_wire[{n}]", f"test_append_embedded[{n}]", f"test_append_grpc[{n}]"} <= set(benchmarks)
    for carrier in ("wire", "grpc", "bare"):     # every server's CPU was measured in the same run
        figures = benchmarks[f"test_echo_floor[{carrier}]"]["extra_info"]["figures"]
        assert figures["server_cpu_us_per_msg"] > 0 and figures["client_cpu_us_per_msg"] > 0
        # the user/kernel split (clock ticks of 10 ms) adds up to the server's CPU (schedstat, exact),
        # within a few ticks over the smoke run's one round
        msgs = benchmarks[f"test_echo_floor[{carrier}]"]["extra_info"]["items"]
        split_s = (figures["server_user_us_per_msg"] + figures["server_kernel_us_per_msg"]) * msgs / 1e6
        cpu_s = figures["server_cpu_us_per_msg"] * msgs / 1e6
        assert abs(split_s - cpu_s) <= 0.04 + 0.1 * cpu_s, (carrier, split_s, cpu_s)
    figures = benchmarks["test_append_wire[32]"]["extra_info"]["figures"]
    assert figures["server_cpu_us_per_append"] > 0 and figures["calls_per_frame"] >= 1
    if placed:
        split = benchmarks["test_append_wire_split_cpus"]["extra_info"]
        assert split["clients"] == 32 and split["figures"]["server_cpu_us_per_append"] > 0
        assert benchmarks["test_append_embedded_one_cpu"]["extra_info"]["rate"] > 0
    procs = benchmarks["test_append_wire_32_processes"]["extra_info"]
    assert procs["clients"] == 4 and procs["rate"] > 0   # 32 at full scale and procs["figures"]["server_cpu_us_per_append"] > 0
