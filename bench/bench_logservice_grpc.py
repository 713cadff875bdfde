"""The log service over gRPC beside the in-process service: durable 256 B appends (fsync=always)
from 1, 4, 16 and 32 client threads.

The server runs as `logtide logservice serve --grpc-listen` in its own process, as deployed (client
and server do not share a GIL), and the client speaks gRPC to that port (carrier="grpc": the framed
carrier, logtide's default, is bench_wire_floor's). All client threads share one client, so their
calls are pipelined on its one stream (docs/rpc.md, "Pipelined calls"). Each gRPC round also records the CPU time per append of
the client process and of the server process.

test_grpc_stream_floor is the floor under the pipelined rows: round trips of a bare gRPC stream
(bench/grpc_echo_server.py: no logtide code on either side, the same grpc.aio client loop and
synchronous server), each carrying a message the size of a 32-call CallBatch and its ReplyBatch;
test_grpc_stream_floor[fdatasync] also writes and fdatasyncs each message at the server, as one
group commit. At 32 appends per round trip their rates are what 32 lockstep callers could reach if
nothing but gRPC (and the one fsync) cost anything (no caller wake-ups, no log, no Python of ours):
ceilings of the pipelined ratio. test_grpc_lockstep_floor adds what 32 callers that each wait for
their own reply cannot avoid: each round, 32 Python threads woken one after another.
"""
from __future__ import annotations

import time

import pytest

from bench.client_threads import Threads
from bench.conftest import scaled
from bench.ratios import Ratio
from bench.server_process import cpu_seconds, start_server

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
    Ratio("the same ceiling for 32 lockstep callers: each round also wakes 32 Python threads one after another",
          "test_grpc_lockstep_floor", "test_append_inproc[32]", None, 13),
]

CLIENTS = (1, 4, 16, 32)
PAYLOAD = b"\xa5" * 256


class Served:
    """`logtide logservice serve` on a directory, in its own process; `.address` is its gRPC port."""

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
                "--grpc-listen", "127.0.0.1:0", "--fsync", fsync]
        # the aio server speaks only gRPC and prints "on ADDR"; `serve` prints its gRPC port after "gRPC on"
        self.proc, self.address = start_server(cmd, Path(path).parent, " on " if aio else "gRPC on ")

    def cpu_s(self) -> float:
        """The server process's user + system CPU seconds so far."""
        return cpu_seconds(self.proc.pid)

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
    client = connect_logservice(server.address, carrier="grpc")
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


class EchoStream:
    """A bare gRPC stream to bench/grpc_echo_server.py (its own process), on the CallLoop that the
    pipelined client's streams run on; each round trip sends `request` and reads `reply_bytes`."""

    def __init__(self, tmp_path, request: bytes, reply_bytes: int, durable: bool) -> None:
        from pathlib import Path
        import sys
        from logtide.engine.rpc.call_loop import CallLoop
        cmd = [sys.executable, str(Path(__file__).with_name("grpc_echo_server.py")), str(reply_bytes)]
        if durable:
            cmd.append(str(tmp_path / "batches"))
        self.proc, self.address = start_server(cmd, tmp_path)
        self.request, self.reply_bytes = request, reply_bytes
        self.loop = CallLoop.get()
        self._channel = self._call = None
        try:
            self.loop.run(self._open(), "opening the bare gRPC stream")
            self.trips(20)
        except BaseException:
            self.close()
            raise

    async def _open(self) -> None:
        import grpc.aio
        from bench.grpc_echo_server import ECHO_PATH
        self._channel = grpc.aio.insecure_channel(self.address)
        self._call = self._channel.stream_stream(ECHO_PATH)()

    async def _trips(self, k: int) -> None:
        for _ in range(k):
            await self._call.write(self.request)
            if len(await self._call.read()) != self.reply_bytes:
                raise AssertionError("the echo server's reply has the wrong size")

    def trips(self, k: int) -> None:
        """k round trips, one after another (from any thread but the loop's)."""
        self.loop.run(self._trips(k), "bare gRPC round trips", timeout=120)

    def servercpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    async def _close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        if self._channel is not None:
            await self._channel.close()

    def close(self) -> None:
        try:
            self.loop.run(self._close(), "closing the bare gRPC stream")
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _timed(echo: EchoStream, cpu: dict, fn) -> None:
    """Run fn() and add the client's and the echo server's CPU time to `cpu` (one more round)."""
    c0, s0 = time.process_time(), echo.servercpu_seconds()
    fn()
    cpu["client"] += time.process_time() - c0
    cpu["server"] += echo.servercpu_seconds() - s0
    cpu["rounds"] += 1


def _floor_figures(benchmark, cpu: dict, per_round: int) -> None:
    figures = {"client_cpu_us_per_round_trip": 1e6 * cpu["client"] / (per_round * cpu["rounds"]),
               "server_cpu_us_per_round_trip": 1e6 * cpu["server"] / (per_round * cpu["rounds"])}
    if benchmark.stats is not None:     # None under --benchmark-disable
        figures["wall_us_per_round_trip"] = 1e6 * benchmark.stats.stats.min / per_round
    benchmark.extra_info["figures"] = figures


@pytest.mark.benchmark(group="logservice-grpc-append")
@pytest.mark.parametrize("durable", ["memory", "fdatasync"])
def test_grpc_stream_floor(benchmark, items, tmp_path, durable):
    """Round trips of a bare gRPC stream, each a 32-call batch's message out and its replies' back,
    with or without an fdatasync of it at the server (see the module doc): items count 32 appends
    per round trip."""
    calls = 32
    request, reply_bytes = _batch_messages(calls)
    trips = scaled(100, minimum=20)
    items(trips * calls, round_trips=trips, request_bytes=len(request), reply_bytes=reply_bytes)
    echo = EchoStream(tmp_path, request, reply_bytes, durable=durable == "fdatasync")
    cpu = {"client": 0.0, "server": 0.0, "rounds": 0}
    try:
        benchmark(_timed, echo, cpu, lambda: echo.trips(trips))
        _floor_figures(benchmark, cpu, trips)
    finally:
        echo.close()


@pytest.mark.benchmark(group="logservice-grpc-append")
def test_grpc_lockstep_floor(benchmark, items, tmp_path):
    """Rounds of 32 lockstep callers at their floor: 32 Python threads pass a baton, each taking
    the GIL once (a call's wake-up and nothing else), and the last does one durable bare round trip
    (test_grpc_stream_floor[fdatasync]) before the first goes again. Items count 32 appends per
    round: the most that 32 callers, each waiting for its own reply, can get through one stream
    here, whatever the code around them."""
    import threading
    calls = 32
    request, reply_bytes = _batch_messages(calls)
    rounds = scaled(100, minimum=20)
    items(rounds * calls, rounds=rounds)
    echo = EchoStream(tmp_path, request, reply_bytes, durable=True)
    batons = [threading.Lock() for _ in range(calls)]
    for b in batons:
        b.acquire()
    state = {"left": 0, "stop": False, "error": None}
    finished = threading.Event()

    def caller(i: int) -> None:
        while True:
            batons[i].acquire()
            if state["stop"]:
                if i + 1 < calls:
                    batons[i + 1].release()
                return
            if i + 1 < calls:
                batons[i + 1].release()
                continue
            try:                           # the round's batch
                echo.trips(1)
            except BaseException as exc:  # noqa: B902 - reported by run()
                state["error"] = exc
                state["left"] = 1
            state["left"] -= 1
            if state["left"] > 0:
                batons[0].release()
            else:
                finished.set()

    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(calls)]
    for t in threads:
        t.start()
    cpu = {"client": 0.0, "server": 0.0, "rounds": 0}

    def all_rounds() -> None:
        state["left"] = rounds
        finished.clear()
        batons[0].release()
        if not finished.wait(120):
            raise TimeoutError("the lockstep floor's rounds did not finish")
        if state["error"] is not None:
            raise state["error"]
    try:
        benchmark(_timed, echo, cpu, all_rounds)
        _floor_figures(benchmark, cpu, rounds)
    finally:
        state["stop"] = True
        batons[0].release()
        for t in threads:
            t.join(timeout=10)
        echo.close()


def plot(benchmarks: dict, outdir) -> list:
    """Appends per second against client threads: over gRPC and in-process."""
    from bench.throughput_plot import throughput_plot
    return throughput_plot(benchmarks, outdir, "logservice_grpc_throughput.png",
                           {"gRPC, sync server": "test_append_grpc", "gRPC, grpc.aio server": "test_append_grpc_aio",
                            "in-process": "test_append_inproc"},
                           "log service: durable 256 B appends (fsync=always)", "appends/s")
