"""The log service over gRPC beside the in-process service: durable 256 B appends (fsync=always)
from 1, 4, 16 and 32 client threads.

The server runs as `logtide logservice serve` in its own process, as deployed (client and server do
not share a GIL). All client threads share one client, so their calls are pipelined on its one
stream (docs/rpc.md, "Pipelined calls"). Each gRPC round also records the CPU time per append of
the client process and of the server process.

test_grpc_stream_floor is the floor under the pipelined rows: round trips of a bare gRPC stream
(bench/grpc_echo_server.py: no logtide code on either side, the same grpc.aio client loop and
synchronous server), each carrying a message the size of a 32-call CallBatch and its ReplyBatch;
test_grpc_stream_floor_durable also writes and fdatasyncs each message at the server, as one group
commit. At 32 appends per round trip their rates are what 32 lockstep callers could reach if
nothing but gRPC (and the one fsync) cost anything (no caller wake-ups, no log, no Python of ours):
ceilings of the pipelined ratio.
"""
from __future__ import annotations

import os
import time

import pytest

from bench.client_threads import Threads
from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("log service over gRPC (pipelined stream) vs in-process, 32 client threads, 256 B, fsync=always",
          "test_append_grpc[32]", "test_append_inproc[32]", 0.5, 13),
    Ratio("the same on a grpc.aio server vs in-process (the sync/asyncio comparison)",
          "test_append_grpc_aio[32]", "test_append_inproc[32]", None, 13),
    Ratio("ceiling of the gRPC ratio: bare gRPC stream round trips (no logtide code; a 32-call batch out, "
          "its replies back) at 32 appends each vs in-process, 32 threads",
          "test_grpc_stream_floor[memory]", "test_append_inproc[32]", None, 13),
    Ratio("the same ceiling with one write + fdatasync of each batch at the server (a bare group commit)",
          "test_grpc_stream_floor[fdatasync]", "test_append_inproc[32]", None, 13),
]

CLIENTS = (1, 4, 16, 32)
PAYLOAD = b"\xa5" * 256


def _start(cmd: list, cwd) -> tuple:
    """Start a server process that prints "... on HOST:PORT" first: (Popen, address)."""
    import subprocess
    # outside the source tree, without the report's PYTHONPATH: the server imports the installed wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            cwd=str(cwd))
    line = proc.stdout.readline()
    if " on " not in line:
        proc.kill()
        raise RuntimeError(f"{cmd[-1]}: the server did not start: {line!r}")
    return proc, line.split(" on ")[1].split()[0]


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Served:
    """`logtide logservice serve` on a directory, in its own process."""

    def __init__(self, path, fsync: str = "always", aio: bool = False) -> None:
        import shutil
        import sys
        from pathlib import Path
        if aio:   # the pipeline on a grpc.aio server (the comparison in docs/rpc.md)
            cmd = [sys.executable, str(Path(__file__).with_name("aio_pipeline_server.py")), str(path), fsync]
        else:
            exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
            cmd = ([exe] if exe else [sys.executable, "-m", "logtide"]) + [
                "logservice", "serve", "--dir", str(path), "--listen", "127.0.0.1:0", "--stats-interval", "0",
                "--fsync", fsync]
        self.proc, self.address = _start(cmd, Path(path).parent)

    def cpu_s(self) -> float:
        """The server process's user + system CPU seconds so far."""
        return _cpu_s(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _per_thread(n: int) -> int:
    return max(2, scaled(3200, minimum=64) // n)


@pytest.mark.benchmark(group="logservice-grpc-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_inproc(benchmark, items, tmp_path, clients):
    from logtide import LogService
    per = _per_thread(clients)
    n = items(per * clients, clients=clients)
    pool = Threads(clients)
    cpu = {"s": 0.0, "rounds": 0}

    def run(svc):
        c0 = time.process_time()
        pool.run(lambda t: [svc.append(PAYLOAD, replica_id=t) for _ in range(per)])
        cpu["s"] += time.process_time() - c0
        cpu["rounds"] += 1
    try:
        with LogService.open(tmp_path / "log", fsync="always") as svc:
            benchmark(run, svc)
        benchmark.extra_info["figures"] = {"cpu_us_per_append": 1e6 * cpu["s"] / (n * cpu["rounds"])}
    finally:
        pool.close()


def _grpc_bench(benchmark, items, tmp_path, clients: int, aio: bool) -> None:
    from logtide import connect_logservice
    per = _per_thread(clients)
    n = items(per * clients, clients=clients, server="grpc.aio" if aio else "grpc (sync)")
    server = Served(tmp_path / "log", fsync="always", aio=aio)
    client = connect_logservice(server.address)
    pool = Threads(clients)
    cpu = {"client": 0.0, "server": 0.0, "rounds": 0}

    def run():
        c0, s0 = time.process_time(), server.cpu_s()
        pool.run(lambda t: [client.append(PAYLOAD, replica_id=t) for _ in range(per)])
        cpu["client"] += time.process_time() - c0
        cpu["server"] += server.cpu_s() - s0
        cpu["rounds"] += 1
    try:
        benchmark(run)
        assert client.get_latest_lsn() == n * cpu["rounds"]
        stream = client._rpc.transport.stream
        benchmark.extra_info["figures"] = {
            "client_cpu_us_per_append": 1e6 * cpu["client"] / (n * cpu["rounds"]),
            "server_cpu_us_per_append": 1e6 * cpu["server"] / (n * cpu["rounds"]),
            "calls_per_batch": stream.calls_sent / max(1, stream.batches_sent)}
    finally:
        pool.close()
        client.close()
        server.stop()


@pytest.mark.benchmark(group="logservice-grpc-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_grpc(benchmark, items, tmp_path, clients):
    """The pipeline on the synchronous gRPC server (what RpcServer runs)."""
    _grpc_bench(benchmark, items, tmp_path, clients, aio=False)


@pytest.mark.benchmark(group="logservice-grpc-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_grpc_aio(benchmark, items, tmp_path, clients):
    """The same pipeline on an asyncio server (bench/aio_pipeline_server.py): the comparison."""
    _grpc_bench(benchmark, items, tmp_path, clients, aio=True)


def _batch_messages(calls: int) -> tuple[bytes, int]:
    """A CallBatch of `calls` pipelined 256 B appends, serialized as the client sends it, and the size
    of the ReplyBatch that answers it."""
    from logtide.engine.logservice import logservice_pb2 as lpb
    from logtide.engine.rpc import pipeline_pb2 as ppb
    from logtide.engine.rpc.call_frames import pack_call, pack_reply
    frames = b"".join(pack_call(i, 0, lpb.AppendRequest(payloads=[PAYLOAD], replica_id=i).SerializeToString())
                      for i in range(calls))
    batch = ppb.CallBatch(max_reply_bytes=4 << 20, methods=["/logtide.logservice.LogService/Append"], frames=frames)
    replies = b"".join(pack_reply(i, lpb.AppendResponse(first_lsn=1_000_000 + i).SerializeToString())
                       for i in range(calls))
    return batch.SerializeToString(), len(ppb.ReplyBatch(frames=replies).SerializeToString())


@pytest.mark.benchmark(group="logservice-grpc-append")
@pytest.mark.parametrize("durable", ["memory", "fdatasync"])
def test_grpc_stream_floor(benchmark, items, tmp_path, durable):
    """Round trips of a bare gRPC stream, each a 32-call batch's message out and its replies' back,
    with or without an fdatasync of it at the server (see the module doc): items count 32 appends
    per round trip."""
    from pathlib import Path
    import sys
    import grpc.aio
    from logtide.engine.rpc.call_loop import CallLoop
    calls = 32
    request, reply_bytes = _batch_messages(calls)
    trips = scaled(100, minimum=20)
    n = items(trips * calls, round_trips=trips, request_bytes=len(request), reply_bytes=reply_bytes)
    cmd = [sys.executable, str(Path(__file__).with_name("grpc_echo_server.py")), str(reply_bytes)]
    if durable == "fdatasync":
        cmd.append(str(tmp_path / "batches"))
    proc, address = _start(cmd, tmp_path)
    loop = CallLoop.get()   # the loop the pipelined client's streams run on
    state: dict = {}
    cpu = {"client": 0.0, "server": 0.0, "rounds": 0}

    async def open_stream() -> None:
        state["channel"] = grpc.aio.insecure_channel(address)
        state["call"] = state["channel"].stream_stream("/floor.Echo/Calls")()

    async def round_trips(k: int) -> None:
        call = state["call"]
        for _ in range(k):
            await call.write(request)
            if len(await call.read()) != reply_bytes:
                raise AssertionError("the echo server's reply has the wrong size")

    async def close_stream() -> None:
        state["call"].cancel()
        await state["channel"].close()

    def run() -> None:
        c0, s0 = time.process_time(), _cpu_s(proc.pid)
        loop.run(round_trips(trips), "bare gRPC round trips", timeout=120)
        cpu["client"] += time.process_time() - c0
        cpu["server"] += _cpu_s(proc.pid) - s0
        cpu["rounds"] += 1
    try:
        loop.run(open_stream(), "opening the bare gRPC stream")
        loop.run(round_trips(20), "warming the bare gRPC stream")
        benchmark(run)
        benchmark.extra_info["figures"] = {
            "client_cpu_us_per_round_trip": 1e6 * cpu["client"] / (trips * cpu["rounds"]),
            "server_cpu_us_per_round_trip": 1e6 * cpu["server"] / (trips * cpu["rounds"]),
            "wall_us_per_round_trip": 1e6 * benchmark.stats.stats.min / trips}
    finally:
        try:
            loop.run(close_stream(), "closing the bare gRPC stream")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def plot(benchmarks: dict, outdir) -> list:
    """Appends per second against client threads: over gRPC and in-process."""
    from bench.throughput_plot import throughput_plot
    return throughput_plot(benchmarks, outdir, "logservice_grpc_throughput.png",
                           {"gRPC, sync server": "test_append_grpc", "gRPC, grpc.aio server": "test_append_grpc_aio",
                            "in-process": "test_append_inproc"},
                           "log service: durable 256 B appends (fsync=always)", "appends/s")
