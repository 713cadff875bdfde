"""The log service over gRPC beside the in-process service: durable 256 B appends (fsync=always)
from 1, 4, 16 and 32 client threads.

The server runs as `logtide logservice serve` in its own process, as deployed (client and server do
not share a GIL). All client threads share one client, so their calls are pipelined on its one
stream (docs/rpc.md, "Pipelined calls"). Each gRPC round also records the CPU time per append of
the client process and of the server process.
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
]

CLIENTS = (1, 4, 16, 32)
PAYLOAD = b"\xa5" * 256


class Served:
    """`logtide logservice serve` on a directory, in its own process."""

    def __init__(self, path, fsync: str = "always", aio: bool = False) -> None:
        import shutil
        import subprocess
        import sys
        from pathlib import Path
        if aio:   # the pipeline on a grpc.aio server (the comparison in docs/rpc.md)
            cmd = [sys.executable, str(Path(__file__).with_name("aio_pipeline_server.py")), str(path), fsync]
        else:
            exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
            cmd = ([exe] if exe else [sys.executable, "-m", "logtide"]) + [
                "logservice", "serve", "--dir", str(path), "--listen", "127.0.0.1:0", "--stats-interval", "0",
                "--fsync", fsync]
        # outside the source tree, without the report's PYTHONPATH: the server imports the installed wheel
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                     cwd=str(Path(path).parent))
        line = self.proc.stdout.readline()
        if " on " not in line:
            self.proc.kill()
            raise RuntimeError(f"logservice serve did not start: {line!r}")
        self.address = line.split(" on ")[1].split()[0]

    def cpu_s(self) -> float:
        """The server process's user + system CPU seconds so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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


def plot(benchmarks: dict, outdir) -> list:
    """Appends per second against client threads: over gRPC and in-process."""
    from bench.throughput_plot import throughput_plot
    return throughput_plot(benchmarks, outdir, "logservice_grpc_throughput.png",
                           {"gRPC, sync server": "test_append_grpc", "gRPC, grpc.aio server": "test_append_grpc_aio",
                            "in-process": "test_append_inproc"},
                           "log service: durable 256 B appends (fsync=always)", "appends/s")
