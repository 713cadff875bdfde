"""Meta-service: embedded upsert/get, and networked upsert/get/txn from 1, 4, 16 and 32 client threads
against etcd (one member; bench_meta_raft.py has 3 replicas against 3 members).

Both servers run as separate processes on loopback; keys are 16 bytes and values 64 bytes. The
meta-service's client threads share one client (`connect_meta`, logtide's framed carrier: the
calls of its threads batch on one connection, docs/rpc.md); etcd runs in its faster set-up of the
run, one gRPC channel shared by the threads or one each (both probed, bench/etcd_cluster.py). The meta rounds also record
the CPU time per call of the client process and of the server process. etcd is Debian's `etcd-server` as a single member (fsync on, the
default); it is driven through etcd v3 KV stubs generated from bench/etcd_kv.proto (etcd's own
field numbers; `make proto`), because the pip client `etcd3` 0.12 ships stubs that protobuf >= 4 refuses.
etcd gets are serializable Ranges, its fastest read. If `etcd` is not installed the etcd benchmarks
skip with that reason, and no ratio is computed.

The networked and etcd comparisons are sustained runs (bench/sustained.py): every client is connected and
a warm-up run is done before the clock starts, then each side runs for the same time (10 s at full
scale) with the same client count; the ratios are of the steady rates. (Before issue 27 a round was
300 calls per thread at 16 threads, with the connections opened inside it, on both sides.)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bench.conftest import scaled
from bench.etcd_kv_client import etcd_kv
from bench.ratios import Ratio
from bench.sustained import PROBE_SECONDS, WARMUP_SECONDS, run_sustained, sustained_benchmark
from logtide.engine.cluster.loopback_ports import free_ports

RATIOS = [
    Ratio("meta-service over the framed carrier: upsert vs etcd put (16 client threads, 64-byte values, sustained, after warm-up)", "test_meta_net_upsert[16]",
          "test_etcd_put[16]", 1.0, 13),
    Ratio("meta-service over the framed carrier: get vs etcd serializable range (16 client threads, sustained, after warm-up)", "test_meta_net_get[16]",
          "test_etcd_get[16]", 1.5, 13),
    Ratio("meta-service over the framed carrier: txn vs etcd txn (16 client threads, sustained, after warm-up)",
          "test_meta_net_txn[16]", "test_etcd_txn[16]", None, 13),
]

HERE = Path(__file__).resolve().parent
CLIENTS = 16                       # the embedded 16-thread benchmark
CLIENT_COUNTS = (1, 4, 16, 32)     # the gRPC and etcd benchmarks, for the throughput plot
N_KEYS = 1000
VALUE = b"v" * 64


def _key(i: int) -> str:
    return f"bench/key/{i:06d}"      # 16 bytes


def _durable() -> bool:
    """The durable service needs the log service; without it the benchmarks say they ran in memory."""
    try:
        import logtide.engine.logservice  # noqa: F401
        return True
    except ImportError:
        return False


def _run_clients(make_client, work, ops: int, n: int = CLIENTS) -> None:
    """n threads, each with the client make_client() gives it, each running `work(client, thread_index, ops)`."""
    clients = [make_client() for _ in range(n)]
    errors = []

    def body(i):
        try:
            work(clients[i], i, ops)
        except Exception as exc:  # re-raised in the benchmark thread
            errors.append(exc)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for c in clients:
        c.close()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- embedded

@pytest.fixture
def embedded(tmp_path):
    from logtide.engine.meta import MetaService
    ms = MetaService.open(tmp_path / "meta") if _durable() else MetaService.in_memory()
    yield ms
    ms.close()


@pytest.mark.benchmark(group="meta-embedded")
def test_meta_embedded_upsert(benchmark, items, embedded):
    """One writer: every upsert waits for its own fsync (the log's group commit needs company)."""
    n = scaled(2_000, minimum=100)
    keys = [_key(i % N_KEYS) for i in range(n)]
    items(n, durable=embedded.durable)

    def run():
        for k in keys:
            embedded.upsert(k, VALUE)
    benchmark.pedantic(run, rounds=3, iterations=1)


@pytest.mark.benchmark(group="meta-embedded")
def test_meta_embedded_upsert_16_threads(benchmark, items, embedded):
    """16 writer threads on one embedded service: concurrent upserts share fsyncs."""
    ops = scaled(300, minimum=10)
    items(CLIENTS * ops, durable=embedded.durable, threads=CLIENTS)

    class _Same:
        def close(self):
            pass

    def work(_, t, n):
        for j in range(n):
            embedded.upsert(_key((t * n + j) % N_KEYS), VALUE)
    benchmark.pedantic(_run_clients, args=(_Same, work, ops), rounds=3, iterations=1)


@pytest.mark.benchmark(group="meta-embedded")
def test_meta_embedded_upsert_in_memory(benchmark, items):
    """The state machine and proposal path alone, without a log."""
    from logtide.engine.meta import MetaService
    ms = MetaService.in_memory()
    n = scaled(20_000)
    keys = [_key(i % N_KEYS) for i in range(n)]
    items(n)

    def run():
        for k in keys:
            ms.upsert(k, VALUE)
    benchmark.pedantic(run, rounds=3, iterations=1)


@pytest.mark.benchmark(group="meta-embedded")
def test_meta_embedded_get(benchmark, items, embedded):
    for i in range(N_KEYS):
        embedded.upsert(_key(i), VALUE)
    n = scaled(100_000)
    keys = [_key(i % N_KEYS) for i in range(n)]
    items(n)

    def run():
        get = embedded.get
        for k in keys:
            get(k)
    benchmark.pedantic(run, rounds=3, iterations=1)


# ---------------------------------------------------------------- meta-service over the network

@pytest.fixture(scope="module")
def meta_server():
    d = tempfile.mkdtemp(prefix="bench-meta-")
    where = ["--dir", os.path.join(d, "meta")] if _durable() else ["--memory"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.Popen([sys.executable, "-m", "logtide", "meta", "serve", *where, "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, text=True, cwd="/", env=env)
    line = p.stdout.readline()
    if not line.startswith("meta-service listening on "):
        p.kill()
        raise RuntimeError(f"meta server did not start: {line!r}")
    addr = line.split()[-1]
    from logtide import connect_meta
    with connect_meta(addr) as c:
        for i in range(N_KEYS):
            c.upsert(_key(i), VALUE)
    yield addr, where[0], p.pid
    p.terminate()
    p.wait(10)
    shutil.rmtree(d, ignore_errors=True)


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _meta_bench(benchmark, meta_server, call, clients: int):
    """`clients` threads sharing one connected client (their calls batch on its connection), each calling
    call(client, key) in a loop; CPU per call of the client process and of the server process."""
    from logtide import connect_meta
    addr, mode, pid = meta_server
    counts = [0] * clients

    def one(c, t):
        counts[t] += 1
        call(c, _key((t * 7919 + counts[t]) % N_KEYS))
    with connect_meta(addr) as c:
        def op(t):
            one(c, t)
        # the CPU figures cover the timed run only: the warm-up runs first, apart
        run_sustained(clients, WARMUP_SECONDS, op)
        c0, s0 = time.process_time(), _cpu_s(pid)
        run = sustained_benchmark(benchmark, clients, op, warmup=0, server=mode)
        client_cpu, server_cpu = time.process_time() - c0, _cpu_s(pid) - s0
    benchmark.extra_info["figures"].update(client_cpu_us_per_call=1e6 * client_cpu / max(1, run.ops),
                                           server_cpu_us_per_call=1e6 * server_cpu / max(1, run.ops))


@pytest.mark.benchmark(group="meta-net-put")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_meta_net_upsert(benchmark, meta_server, clients):
    _meta_bench(benchmark, meta_server, lambda c, k: c.upsert(k, VALUE), clients)


def _get(c, k):
    assert c.get(k) is not None


@pytest.mark.benchmark(group="meta-net-get")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_meta_net_get(benchmark, meta_server, clients):
    _meta_bench(benchmark, meta_server, _get, clients)


@pytest.mark.benchmark(group="meta-net-txn")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_meta_net_txn(benchmark, meta_server, clients):
    from logtide.engine.meta import cond, op

    def txn(c, k):
        r = c.txn(conditions=[cond.seq(k, ">", 0)], if_then=[op.put(k, VALUE)], else_then=[op.get(k)])
        assert r.success
    _meta_bench(benchmark, meta_server, txn, clients)


# ---------------------------------------------------------------- etcd

@pytest.fixture(scope="module")
def etcd():
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not installed (Debian package etcd-server): the etcd peer is not measured")
    import grpc
    from bench import etcd_kv_pb2 as pb
    d = tempfile.mkdtemp(prefix="bench-etcd-")
    cport, pport = free_ports(2)
    p = subprocess.Popen([exe, "--name", "bench", "--data-dir", os.path.join(d, "data"),
                          "--listen-client-urls", f"http://127.0.0.1:{cport}",
                          "--advertise-client-urls", f"http://127.0.0.1:{cport}",
                          "--listen-peer-urls", f"http://127.0.0.1:{pport}",
                          "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
                          "--initial-cluster", f"bench=http://127.0.0.1:{pport}",
                          "--log-level", "error"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    addr = f"127.0.0.1:{cport}"
    ch = grpc.insecure_channel(addr)
    stub = etcd_kv(ch, pb)
    end = time.monotonic() + 30
    while True:
        try:
            stub.Range(pb.RangeRequest(key=b"probe"), timeout=1)
            break
        except grpc.RpcError:
            if time.monotonic() > end or p.poll() is not None:
                p.kill()
                raise RuntimeError("etcd did not come up")
            time.sleep(0.2)
    for i in range(N_KEYS):
        stub.Put(pb.PutRequest(key=_key(i).encode(), value=VALUE))
    ch.close()
    yield addr, pb
    p.terminate()
    p.wait(10)
    shutil.rmtree(d, ignore_errors=True)


def _etcd_bench(benchmark, etcd, call, clients: int):
    """`clients` threads calling call(pb, connection, key) in a loop, in etcd's faster set-up of this
    run: one channel shared by the threads, or one each (bench/etcd_cluster.py, both probed)."""
    from bench.etcd_cluster import close_connections, fastest_connections
    addr, pb = etcd
    counts = [0] * clients

    def op(c, t):
        counts[t] += 1
        call(pb, c, _key((t * 7919 + counts[t]) % N_KEYS).encode())
    conns, info = fastest_connections([addr], pb, clients, op, PROBE_SECONDS)
    try:
        sustained_benchmark(benchmark, clients, lambda t: op(conns[t], t), **info)
    finally:
        close_connections(conns)


@pytest.mark.benchmark(group="meta-net-put")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_etcd_put(benchmark, etcd, clients):
    def put(pb, c, k):
        c.kv.Put(pb.PutRequest(key=k, value=VALUE), timeout=30)
    _etcd_bench(benchmark, etcd, put, clients)


@pytest.mark.benchmark(group="meta-net-get")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_etcd_get(benchmark, etcd, clients):
    def get(pb, c, k):
        assert c.kv.Range(pb.RangeRequest(key=k, serializable=True), timeout=30).kvs
    _etcd_bench(benchmark, etcd, get, clients)


@pytest.mark.benchmark(group="meta-net-txn")
@pytest.mark.parametrize("clients", CLIENT_COUNTS)
def test_etcd_txn(benchmark, etcd, clients):
    def txn(pb, c, k):
        req = pb.TxnRequest(
            compare=[pb.Compare(result=pb.Compare.GREATER, target=pb.Compare.MOD, key=k, mod_revision=0)],
            success=[pb.RequestOp(request_put=pb.PutRequest(key=k, value=VALUE))],
            failure=[pb.RequestOp(request_range=pb.RangeRequest(key=k))])
        assert c.kv.Txn(req, timeout=30).succeeded
    _etcd_bench(benchmark, etcd, txn, clients)


def plot(benchmarks: dict, outdir) -> list:
    """Calls per second against client threads: the meta-service over gRPC and etcd."""
    from bench.throughput_plot import throughput_plot
    out = []
    for what, meta, etcd in (("put", "test_meta_net_upsert", "test_etcd_put"),
                             ("get", "test_meta_net_get", "test_etcd_get"),
                             ("txn", "test_meta_net_txn", "test_etcd_txn")):
        out += throughput_plot(benchmarks, outdir, f"meta_net_{what}_throughput.png",
                               {"meta-service (framed carrier)": meta, "etcd": etcd},
                               f"meta-service vs etcd: {what}", "calls/s")
    return out
