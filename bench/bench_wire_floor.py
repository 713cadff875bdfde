"""The framed TCP carrier (docs/rpc.md, "The framed carrier") beside its baselines, in the same run.

**Transport floor.** An echo of 256 B messages over 32 lockstep connections (4 client processes of
8 connections, each connection waiting for its reply before sending again): the framed carrier's
server (bench/wire_echo_server.py: WireServer, the Diagnostics Ping answered with its request's
bytes on the server's loop) against a grpc-python streaming echo (bench/grpc_echo_server.py: the
synchronous grpc.server, one bidi stream per connection). Both echoes are bare: no protobuf work
at the server. Beside them, the floor under any Python server here: a bare uvloop Protocol echoing
length-prefixed frames to blocking-socket clients (bench/bare_echo_server.py, the design issue 24
measured at 5.8 us per message), so the kernel's share of a message is in the same run. Servers
and clients run in processes of their own, started and connected before any timed round. Each
round records the server process's CPU per message (the issue's goal for the framed carrier:
<= 10 us), split into user and kernel time, and the clients' CPU.

**The log service.** Durable 256 B appends (fsync=always) from 1, 4, 16 and 32 threads sharing one
client of `logtide logservice serve` (its own process) over the framed carrier, against the
embedded LogService appended to by as many threads in this process (goal at 32 threads: >= 0.6x),
and from 32 client processes of one thread each; and the same server's gRPC port (the interop
carrier, one plain gRPC call per append) from as many threads. Sustained runs (bench/sustained.py): everything
started and connected before the clock, the same seconds on every side.
At 32 threads each side also runs in a placement of its own (logtide.cpu_affinity): the embedded
service confined to one CPU, and the server (`logtide --cpus`) and its client process each confined
to one CPU of their own; that ratio takes the embedded service's faster run of its two placements.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.conftest import SCALE, cpu_pair_or_skip, scaled
from bench.ratios import Ratio
from bench.server_process import cpu_seconds, start_server, user_kernel_seconds
from bench.sustained import SECONDS, WARMUP_SECONDS, run_sustained, sustained_benchmark

RATIOS = [
    Ratio("transport floor: framed-carrier echo vs grpc-python streaming echo, 32 lockstep connections "
          "from 4 processes, 256 B (messages/s)", "test_echo_floor[wire]", "test_echo_floor[grpc]", None, 24),
    Ratio("log service over the framed carrier vs the embedded service, 32 threads, 256 B, fsync=always, sustained",
          "test_append_wire[32]", "test_append_embedded[32]", 0.6, 24),
    # each side in the placement it does best in (as bench_durable_writes): the embedded service's
    # faster run of two CPUs and one; the server confined to one CPU and its client to the other
    Ratio("the same, each side in its best placement: server and client each confined to a CPU of their own vs "
          "the embedded service's faster run (2 CPUs, or confined to one)", "test_append_wire_split_cpus",
          ("test_append_embedded[32]", "test_append_embedded_one_cpu"), 0.6, 24),
    Ratio("the same with 32 client processes of one thread each vs the embedded service's 32 threads",
          "test_append_wire_32_processes", "test_append_embedded[32]", None, 24),
    Ratio("the interop carrier: the same server's gRPC port (a plain gRPC call per append) vs the embedded "
          "service, 32 threads", "test_append_grpc[32]", "test_append_embedded[32]", None, 24),
]

PAYLOAD = b"\xa5" * 256
CONNECTIONS, PROCESSES = 32, 4
# the suite's small-scale smoke run starts 4: each start imports logtide, 9 s for 32 on two CPUs
APPEND_PROCESSES = 32 if SCALE >= 0.1 else 4
CLIENTS = (1, 4, 16, 32)
# messages per connection per round: at full scale a round lasts >= 10 s on this machine
PER_CONNECTION = {"wire": 12000, "grpc": 2500, "bare": 17000}
SERVERS = {"wire": ["wire_echo_server.py"], "grpc": ["grpc_echo_server.py", str(len(PAYLOAD))],
           "bare": ["bare_echo_server.py"]}


class EchoClients:
    """PROCESSES client processes (bench/echo_clients.py) of CONNECTIONS // PROCESSES connections each."""

    def __init__(self, carrier: str, address: str, cwd) -> None:
        import os
        # outside the source tree, without the report's PYTHONPATH: the clients import the installed wheel
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = str(Path(__file__).with_name("echo_clients.py"))
        self.procs = [subprocess.Popen([sys.executable, script, carrier, address, str(CONNECTIONS // PROCESSES),
                                        str(len(PAYLOAD))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(cwd))
                      for _ in range(PROCESSES)]
        for p in self.procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                self.close()
                raise RuntimeError(f"an echo client did not start: {line!r}")

    def round(self, n: int) -> float:
        """n round trips on every connection; the client processes' CPU seconds."""
        for p in self.procs:
            p.stdin.write(f"run {n}\n")
            p.stdin.flush()
        cpu = 0.0
        for p in self.procs:
            line = p.stdout.readline().split()
            if not line or line[0] != "done":
                raise RuntimeError(f"an echo client failed: {' '.join(line)!r}")
            cpu += float(line[1])
        return cpu

    def close(self) -> None:
        for p in self.procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.benchmark(group="wire-floor")
@pytest.mark.parametrize("carrier", ["wire", "grpc", "bare"])
def test_echo_floor(benchmark, items, tmp_path, carrier):
    """256 B echoes, 32 lockstep connections from 4 processes; items are messages (round trips)."""
    here = Path(__file__).parent
    script, *args = SERVERS[carrier]
    per = scaled(PER_CONNECTION[carrier], minimum=20)
    n = items(per * CONNECTIONS, connections=CONNECTIONS, processes=PROCESSES, payload=len(PAYLOAD))
    proc, address = start_server([sys.executable, str(here / script), *args], tmp_path)
    clients = None
    cpu = {"server": 0.0, "client": 0.0, "user": 0.0, "kernel": 0.0, "rounds": 0, "wall": []}
    try:
        clients = EchoClients(carrier, address, tmp_path)

        def run():
            (u0, k0), s0, t0 = user_kernel_seconds(proc.pid), cpu_seconds(proc.pid), time.monotonic()
            cpu["client"] += clients.round(per)
            cpu["wall"].append(time.monotonic() - t0)
            cpu["server"] += cpu_seconds(proc.pid) - s0
            u1, k1 = user_kernel_seconds(proc.pid)
            cpu["user"] += u1 - u0
            cpu["kernel"] += k1 - k0
            cpu["rounds"] += 1
        benchmark.pedantic(run, rounds=3 if SCALE >= 1 else 1, iterations=1)
        msgs = n * cpu["rounds"]
        benchmark.extra_info["figures"] = {
            "server_cpu_us_per_msg": 1e6 * cpu["server"] / msgs,
            # from clock ticks (10 ms): the split of the figure above, not a second measure of it
            "server_user_us_per_msg": 1e6 * cpu["user"] / msgs,
            "server_kernel_us_per_msg": 1e6 * cpu["kernel"] / msgs,
            "client_cpu_us_per_msg": 1e6 * cpu["client"] / msgs,
            "msgs_per_s_best_round": n / min(cpu["wall"]),
            "round_s_shortest": min(cpu["wall"])}
    finally:
        if clients is not None:
            clients.close()
        proc.terminate()
        proc.wait(timeout=30)


def _serve(tmp_path, grpc: bool = False, cpus=None):
    """(process, address): the log service in its own process (on `cpus` only, when given); with
    grpc=True, its gRPC port's address."""
    import shutil
    exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
    placed = ["--cpus", ",".join(map(str, sorted(cpus)))] if cpus else []
    return start_server(([exe] if exe else [sys.executable, "-m", "logtide"]) + placed + [
        "logservice", "serve", "--dir", str(tmp_path / "log"), "--listen", "127.0.0.1:0", "--stats-interval", "0",
        "--fsync", "always", *(["--grpc-listen", "127.0.0.1:0"] if grpc else [])], tmp_path,
        "gRPC on " if grpc else " on ")


@pytest.mark.benchmark(group="wire-logservice-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_embedded(benchmark, tmp_path, clients):
    """The baseline: the embedded LogService, `clients` threads appending in this process (sustained)."""
    from logtide import LogService
    with LogService.open(tmp_path / "log", fsync="always") as svc:
        sustained_benchmark(benchmark, clients, lambda t: svc.append(PAYLOAD, replica_id=t))


@pytest.mark.benchmark(group="wire-logservice-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_wire(benchmark, tmp_path, clients):
    """`logtide logservice serve` in its own process; `clients` threads share one framed-carrier client."""
    _wire_run(benchmark, tmp_path, clients)


# The 32-thread runs again, each side in the placement it does best in (after the runs above).
# Their Python runs on one CPU at a time (the GIL), and a wake-up that crosses to the other CPU
# costs this VM far more than one on the same CPU (bench/bench_wake_cost.py). The embedded service
# is opened inside its confinement, so its flusher shares it. The server runs with `logtide --cpus`;
# this process's threads, the client's event loop among them, are confined to the other CPU.

@pytest.mark.benchmark(group="wire-logservice-append-placed")
def test_append_embedded_one_cpu(benchmark, tmp_path):
    from logtide import LogService
    from logtide.cpu_affinity import confined
    with confined(cpu_pair_or_skip()[0]):
        with LogService.open(tmp_path / "log", fsync="always") as svc:
            sustained_benchmark(benchmark, 32, lambda t: svc.append(PAYLOAD, replica_id=t))


@pytest.mark.benchmark(group="wire-logservice-append-placed")
def test_append_wire_split_cpus(benchmark, tmp_path):
    mine, server = cpu_pair_or_skip()
    _wire_run(benchmark, tmp_path, 32, placement=(server, mine))


def _wire_run(benchmark, tmp_path, clients: int, placement=None) -> None:
    """With placement=(server CPUs, client CPUs): the server started on its CPUs, then every thread
    of this process confined to the client's until the run ends (a child inherits its parent's set,
    so the server starts first)."""
    from logtide import connect_logservice
    from logtide.cpu_affinity import allowed_cpus, confine_process
    before = allowed_cpus()
    proc, address = _serve(tmp_path, cpus=placement[0] if placement else None)
    client = None
    try:
        if placement:
            confine_process(placement[1])
        client = connect_logservice(address)
        client.append(PAYLOAD)                    # connected before the clock
        op = lambda t: client.append(PAYLOAD, replica_id=t)                # noqa: E731
        run_sustained(clients, WARMUP_SECONDS, op)
        s0 = cpu_seconds(proc.pid)
        run = sustained_benchmark(benchmark, clients, op, warmup=0)
        slots = client._rpc.transport.connection.slots
        benchmark.extra_info["figures"].update(
            server_cpu_us_per_append=1e6 * (cpu_seconds(proc.pid) - s0) / max(1, run.ops),
            calls_per_frame=slots.calls / max(1, slots.batches))
    finally:
        if client is not None:
            client.close()
        if placement:
            confine_process(before)
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.benchmark(group="wire-logservice-append")
@pytest.mark.parametrize("clients", CLIENTS)
def test_append_grpc(benchmark, tmp_path, clients):
    """The same server's gRPC port (the interop carrier: one plain gRPC call per append), `clients`
    threads sharing one client with carrier="grpc"."""
    from logtide import connect_logservice
    proc, address = _serve(tmp_path, grpc=True)
    client = connect_logservice(address, carrier="grpc")
    try:
        client.append(PAYLOAD)
        op = lambda t: client.append(PAYLOAD, replica_id=t)                # noqa: E731
        run_sustained(clients, WARMUP_SECONDS, op)
        s0 = cpu_seconds(proc.pid)
        run = sustained_benchmark(benchmark, clients, op, warmup=0)
        benchmark.extra_info["figures"].update(
            server_cpu_us_per_append=1e6 * (cpu_seconds(proc.pid) - s0) / max(1, run.ops))
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.benchmark(group="wire-logservice-append-processes")
def test_append_wire_32_processes(benchmark, tmp_path):
    """32 client processes (APPEND_PROCESSES) of one thread each (bench/append_clients.py), each
    appending in lockstep for the same seconds; every process is started and connected before the
    clock."""
    n = APPEND_PROCESSES
    proc, address = _serve(tmp_path)
    script = str(Path(__file__).with_name("append_clients.py"))
    clients = [subprocess.Popen([sys.executable, script, address, str(len(PAYLOAD))], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=tmp_path) for _ in range(n)]
    try:
        for c in clients:
            assert c.stdout.readline().strip() == "ready"
        result = {}

        def run():
            t0 = time.time() + 0.5
            s0 = cpu_seconds(proc.pid)
            for c in clients:
                c.stdin.write(f"run {SECONDS} {t0}\n")
                c.stdin.flush()
            done = [c.stdout.readline().split() for c in clients]
            result["ops"] = sum(int(d[1]) for d in done)
            result["client_cpu"] = sum(float(d[2]) for d in done)
            result["server_cpu"] = cpu_seconds(proc.pid) - s0
        benchmark.pedantic(run, rounds=1, iterations=1)
        ops = max(1, result["ops"])
        benchmark.extra_info.update(items=ops, clients=n, rate=ops / SECONDS, seconds=SECONDS, figures={
            "server_cpu_us_per_append": 1e6 * result["server_cpu"] / ops,
            "client_cpu_us_per_append": 1e6 * result["client_cpu"] / ops})
    finally:
        for c in clients:
            try:
                c.stdin.write("quit\n")
                c.stdin.flush()
            except OSError:
                pass
        for c in clients:
            try:
                c.wait(timeout=30)
            except subprocess.TimeoutExpired:
                c.kill()
        proc.terminate()
        proc.wait(timeout=30)


def plot(benchmarks: dict, outdir) -> list:
    """Appends per second against client threads: over the framed carrier and embedded."""
    from bench.throughput_plot import throughput_plot
    return throughput_plot(benchmarks, outdir, "wire_logservice_throughput.png",
                           {"framed carrier, one shared client": "test_append_wire",
                            "gRPC (interop), one shared client": "test_append_grpc",
                            "embedded": "test_append_embedded"},
                           "log service: durable 256 B appends (fsync=always)", "appends/s")
