"""bench/bench_wire_floor.py runs end to end at a small scale and its ratios are computed."""
import pytest


@pytest.mark.timeout(300)
def test_wire_floor_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_wire_floor", timeout=280)
    assert len(rows) == 4 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    for n in (1, 4, 16, 32):
        assert {f"test_append_wire[{n}]", f"test_append_embedded[{n}]", f"test_append_grpc[{n}]"} <= set(benchmarks)
    for carrier in ("wire", "grpc"):     # both servers' CPU was measured in the same run
        figures = benchmarks[f"test_echo_floor[{carrier}]"]["extra_info"]["figures"]
        assert figures["server_cpu_us_per_msg"] > 0 and figures["client_cpu_us_per_msg"] > 0
    figures = benchmarks["test_append_wire[32]"]["extra_info"]["figures"]
    assert figures["server_cpu_us_per_append"] > 0 and figures["calls_per_frame"] >= 1
    procs = benchmarks["test_append_wire_32_processes"]["extra_info"]
    assert procs["clients"] == 4 and procs["rate"] > 0   # 32 at full scale and procs["figures"]["server_cpu_us_per_append"] > 0
