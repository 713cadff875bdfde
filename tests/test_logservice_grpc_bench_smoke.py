"""bench/bench_logservice_grpc.py runs end to end at a small scale and its ratios are computed."""
import pytest


@pytest.mark.timeout(300)
def test_logservice_grpc_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_logservice_grpc", timeout=280)
    assert len(rows) == 5 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    for n in (1, 4, 16, 32):
        assert {f"test_append_grpc[{n}]", f"test_append_grpc_aio[{n}]", f"test_append_inproc[{n}]"} <= set(benchmarks)
    assert benchmarks["test_append_grpc[32]"]["extra_info"]["figures"]["client_cpu_us_per_append"] > 0
    # the bare-gRPC ceilings ran and measured both processes
    for name in ("test_grpc_stream_floor[memory]", "test_grpc_stream_floor[fdatasync]", "test_grpc_lockstep_floor"):
        figures = benchmarks[name]["extra_info"]["figures"]
        assert figures["client_cpu_us_per_round_trip"] > 0 and figures["server_cpu_us_per_round_trip"] > 0
