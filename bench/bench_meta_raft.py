"""The meta-service as a 3-replica Raft group against a 3-member etcd cluster, both on loopback
with fsync on, 16 clients, 16-byte keys and 64-byte values (issue 25):

- upsert against etcd's put;
- linearizable get (ReadIndex on the leader) against etcd's linearizable range (its default);
- stale get (the answering replica's applied state) against etcd's serializable range.

Sustained runs (bench/sustained.py): every client is connected and a warm-up is run before the
clock, then each side runs for the same time (10 s at full scale). logtide's 16 client threads
share one client, as a process does (its calls of many threads batch on one connection of the
framed carrier, and it follows the leader); etcd runs in whichever set-up is faster in this run,
one gRPC channel shared by its 16 threads or a channel per thread spread over the members (both
are probed first: which wins differs with the call and the member count). logtide's
stale reads go to every replica the same way: one client per replica address, not following
the leader. If `etcd` is not installed (`make etcd`) the etcd side skips and no ratio is computed.
"""
from __future__ import annotations

import itertools
import shutil

import pytest

from bench.ratios import Ratio
from bench.sustained import PROBE_SECONDS, SECONDS, sustained_benchmark

RATIOS = [
    Ratio("meta-service 3 Raft replicas upsert vs etcd 3-member put (16 clients, 64 B, sustained)",
          "test_meta_raft_upsert", "test_etcd3_kv_put", 1.0, 25),
    Ratio("meta-service 3 replicas linearizable get vs etcd 3-member linearizable range (16 clients, sustained)",
          "test_meta_raft_get_linearizable", "test_etcd3_range_linearizable", 1.5, 25),
    Ratio("meta-service 3 replicas stale get vs etcd 3-member serializable range (16 clients, sustained)",
          "test_meta_raft_get_stale", "test_etcd3_range_serializable", None, 25),
]

CLIENTS = 16
# the sustained runs: two per-second samples at least at small scales (the smoke test checks the series)
RUN_SECONDS = max(2, SECONDS)
N_KEYS = 1000
VALUE = b"v" * 64


def _key(i: int) -> str:
    return f"bench/key/{i:06d}"      # 16 bytes


@pytest.fixture(scope="module")
def meta_group():
    from logtide.engine.meta.client import connect_meta
    from bench.meta_raft_cluster import MetaRaftCluster
    c = MetaRaftCluster()
    with connect_meta(c.addresses) as m:
        for i in range(N_KEYS):
            m.upsert(_key(i), VALUE)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def etcd_group():
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not installed (Debian package etcd-server, `make etcd`): the etcd peer is not measured")
    from bench.etcd_cluster import EtcdCluster, EtcdClient
    c = EtcdCluster(exe)
    k = EtcdClient(c.addresses[0], c.pb)
    for i in range(N_KEYS):
        k.kv.Put(c.pb.PutRequest(key=_key(i).encode(), value=VALUE), timeout=30)
    k.close()
    yield c
    c.stop()


def _keys():
    """Per thread, an endless walk over the keys (different threads, different keys)."""
    return [itertools.cycle(_key((t * 7919 + i) % N_KEYS) for i in range(N_KEYS)) for t in range(CLIENTS)]


@pytest.mark.benchmark(group="meta-raft-upsert")
def test_meta_raft_upsert(benchmark, meta_group):
    from logtide.engine.meta.client import connect_meta
    keys = _keys()
    with connect_meta(meta_group.addresses) as m:
        sustained_benchmark(benchmark, CLIENTS, lambda t: m.upsert(next(keys[t]), VALUE), seconds=RUN_SECONDS)


@pytest.mark.benchmark(group="meta-raft-get")
def test_meta_raft_get_linearizable(benchmark, meta_group):
    from logtide.engine.meta.client import connect_meta
    keys = _keys()
    with connect_meta(meta_group.addresses) as m:
        def get(t):
            assert m.get(next(keys[t])) is not None
        sustained_benchmark(benchmark, CLIENTS, get, seconds=RUN_SECONDS)


@pytest.mark.benchmark(group="meta-raft-get-stale")
def test_meta_raft_get_stale(benchmark, meta_group):
    from logtide.engine.meta.client import connect_meta
    keys = _keys()
    addrs = meta_group.addresses.split(",")
    clients = [connect_meta(a, follow_leader=False) for a in addrs]
    try:
        def get(t):
            assert clients[t % len(clients)].get(next(keys[t]), consistency="stale") is not None
        sustained_benchmark(benchmark, CLIENTS, get, seconds=RUN_SECONDS)
    finally:
        for c in clients:
            c.close()


def _etcd(benchmark, etcd_group, call) -> None:
    """etcd in its faster set-up, probed in this run: one gRPC channel shared by the 16 threads (as
    logtide's share one client) or a channel per thread (bench/etcd_cluster.py)."""
    from bench.etcd_cluster import close_connections, fastest_connections
    keys = _keys()
    op = lambda c, t: call(etcd_group.pb, c, next(keys[t]).encode())      # noqa: E731
    conns, info = fastest_connections(etcd_group.addresses, etcd_group.pb, CLIENTS, op, PROBE_SECONDS)
    try:
        sustained_benchmark(benchmark, CLIENTS, lambda t: op(conns[t], t), **info, seconds=RUN_SECONDS)
    finally:
        close_connections(conns)


@pytest.mark.benchmark(group="meta-raft-upsert")
def test_etcd3_kv_put(benchmark, etcd_group):
    _etcd(benchmark, etcd_group, lambda pb, c, k: c.kv.Put(pb.PutRequest(key=k, value=VALUE), timeout=30))


@pytest.mark.benchmark(group="meta-raft-get")
def test_etcd3_range_linearizable(benchmark, etcd_group):
    def get(pb, c, k):
        assert c.kv.Range(pb.RangeRequest(key=k), timeout=30).kvs
    _etcd(benchmark, etcd_group, get)


@pytest.mark.benchmark(group="meta-raft-get-stale")
def test_etcd3_range_serializable(benchmark, etcd_group):
    def get(pb, c, k):
        assert c.kv.Range(pb.RangeRequest(key=k, serializable=True), timeout=30).kvs
    _etcd(benchmark, etcd_group, get)
