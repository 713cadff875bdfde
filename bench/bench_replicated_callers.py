"""What replication costs a caller, against the same caller on its embedded log: the meta-service
(16 client threads doing upserts; replicated: its own 3-replica Raft group, `meta serve --raft`)
and the replication primary (16 backends doing single-tuple inserts; replicated: its WAL on a
3-replica log service, `--log h1:p1,h2:p2,h3:p3`). Every server is a real process on loopback with
fsync on; clients speak the framed carrier. No goal is set for these ratios."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.client_threads import Threads
from bench.conftest import scaled
from bench.raft_cluster import LOGTIDE, RaftCluster
from bench.ratios import Ratio

RATIOS = [
    Ratio("meta-service upsert on 3 Raft replicas vs one process on its embedded log (16 client threads)",
          "test_meta_upsert[replicated]", "test_meta_upsert[embedded]", None, 12),
    Ratio("primary single-tuple insert on 3 Raft replicas vs on its embedded log (16 backends)",
          "test_primary_insert_by_log[replicated]", "test_primary_insert_by_log[embedded]", None, 12),
]

CLIENTS = 16
REL = 16384
VALUE = b"v" * 64


@pytest.fixture(params=["embedded", "replicated"])
def log_args(request):
    """The primary's --log arguments: none, or a fresh 3-replica group (a log has one owner)."""
    if request.param == "embedded":
        yield []
        return
    d = Path(tempfile.mkdtemp(prefix="bench-rcallers-"))
    c = RaftCluster(d)
    try:
        c.leader()
        yield ["--log", c.addresses]
    finally:
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def _stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)


@pytest.fixture(params=["embedded", "replicated"])
def meta_address(request, tmp_path):
    """A meta-service: one process on its embedded log, or a 3-replica Raft group."""
    if request.param == "replicated":
        from bench.meta_raft_cluster import MetaRaftCluster
        c = MetaRaftCluster()
        yield c.addresses
        c.stop()
        return
    p = subprocess.Popen([LOGTIDE, "meta", "serve", "--dir", str(tmp_path / "meta"), "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        line = p.stdout.readline()
        if not line.startswith("meta-service listening on "):
            raise RuntimeError(f"the meta-service did not start: {line!r}")
        yield line.split()[-1]
    finally:
        _stop(p)


@pytest.mark.benchmark(group="replicated-callers")
def test_meta_upsert(benchmark, items, meta_address):
    from logtide import connect_meta
    client = connect_meta(meta_address, timeout=30)
    try:
        per = max(10, scaled(3200, minimum=160) // CLIENTS)
        items(per * CLIENTS, clients=CLIENTS)
        threads = Threads(CLIENTS)

        def work(t):
            for j in range(per):
                client.upsert(f"bench/{t:02d}/{j % 50:04d}", VALUE)
        benchmark.pedantic(threads.run, args=(work,), rounds=3, iterations=1, warmup_rounds=1)
        threads.close()
    finally:
        client.close()


@pytest.mark.benchmark(group="replicated-callers")
def test_primary_insert_by_log(benchmark, items, tmp_path, log_args):
    from logtide.engine.rpc import connect
    from logtide.replay.replication_rpc import REPLAY_NODE
    port_file = tmp_path / "primary.port"
    p = subprocess.Popen([sys.executable, "-m", "logtide", "replay", "primary", "--dir", str(tmp_path / "shared"),
                          "--port-file", str(port_file), *log_args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        end = time.monotonic() + 60
        while not port_file.exists():
            if p.poll() is not None or time.monotonic() > end:
                raise RuntimeError("the primary did not start")
            time.sleep(0.05)
        addr = f"127.0.0.1:{port_file.read_text()}"
        clients = [connect(REPLAY_NODE, addr, timeout=30) for _ in range(CLIENTS)]
        per = max(10, scaled(3200, minimum=160) // CLIENTS)
        items(per * CLIENTS, clients=CLIENTS)
        threads = Threads(CLIENTS)

        def work(t):
            c = clients[t]
            for j in range(per):
                c.Insert(rel=REL, data=b"b%02d-%06d " % (t, j) * 4)
        benchmark.pedantic(threads.run, args=(work,), rounds=3, iterations=1, warmup_rounds=1)
        threads.close()
        for c in clients:
            c.close()
    finally:
        _stop(p)
