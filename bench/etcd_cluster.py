"""A 3-member etcd cluster on loopback (Debian's etcd-server, fsync on, its defaults), the peer of the
replicated benchmarks; and an etcd v3 KV client on one gRPC channel."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from bench.etcd_kv_client import etcd_kv
from bench.raft_cluster import free_ports


class EtcdClient:
    """etcd's KV calls (Put, Range, Txn...) on a channel of its own to one member."""

    def __init__(self, addr: str, pb) -> None:
        import grpc
        self.channel = grpc.insecure_channel(addr)
        self.kv = etcd_kv(self.channel, pb)

    def close(self) -> None:
        self.channel.close()


class EtcdCluster:
    """Members m0..m2; `addresses` are their client URLs' host:port. None of it is timed."""

    def __init__(self, exe: str, members: int = 3) -> None:
        from bench import etcd_kv_pb2 as pb
        self.pb = pb
        self.dir = tempfile.mkdtemp(prefix="bench-etcd3-")
        ports = free_ports(2 * members)
        cluster = ",".join(f"m{i}=http://127.0.0.1:{ports[members + i]}" for i in range(members))
        self.procs = [subprocess.Popen([exe, "--name", f"m{i}", "--data-dir", os.path.join(self.dir, f"m{i}"),
                                        "--listen-client-urls", f"http://127.0.0.1:{ports[i]}",
                                        "--advertise-client-urls", f"http://127.0.0.1:{ports[i]}",
                                        "--listen-peer-urls", f"http://127.0.0.1:{ports[members + i]}",
                                        "--initial-advertise-peer-urls", f"http://127.0.0.1:{ports[members + i]}",
                                        "--initial-cluster", cluster, "--initial-cluster-state", "new",
                                        "--log-level", "error"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for i in range(members)]
        self.addresses = [f"127.0.0.1:{ports[i]}" for i in range(members)]
        self._wait_up()

    def _wait_up(self, timeout: float = 60.0) -> None:
        import grpc
        c = EtcdClient(self.addresses[0], self.pb)
        end = time.monotonic() + timeout
        try:
            while True:
                try:
                    c.kv.Put(self.pb.PutRequest(key=b"probe", value=b"x"), timeout=2)
                    return
                except grpc.RpcError:
                    if time.monotonic() > end:
                        self.stop()
                        raise RuntimeError("the etcd cluster did not come up") from None
                    time.sleep(0.2)
        finally:
            c.close()

    def stop(self) -> None:
        # killed, not terminated: the data directory is deleted next, and a graceful stop of all the
        # members at once spends ~7 s trying to hand leadership over to a member that is stopping too
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def fastest_connections(addresses: list, pb, clients: int, op, probe_seconds: float) -> tuple[list, dict]:
    """etcd's fastest set-up for `clients` threads calling op(connection, t): one gRPC channel that
    every thread shares, a channel per thread spread over the members, or (with several members) a
    channel per thread all on one member, for each member: on the leader, no put is forwarded (7 Dec,
    32 threads on this host: 2,903 puts/s spread, 2,944-3,289 all on one member). Each is probed for
    `probe_seconds` (after a short warm-up) and the fastest kept, so the baseline is the best etcd
    does here (which one wins differs with the member count and the call: it was measured every
    way). Returns (the connection of each thread, {"etcd_setup", "etcd_probe_rates"}); close them
    with close_connections."""
    from bench.sustained import run_sustained
    setups = {"shared": lambda: [EtcdClient(addresses[0], pb)] * clients,
              "per-thread": lambda: [EtcdClient(addresses[t % len(addresses)], pb) for t in range(clients)]}
    if len(addresses) > 1:
        for i, a in enumerate(addresses):
            setups[f"per-thread on member {i}"] = lambda a=a: [EtcdClient(a, pb) for _ in range(clients)]
    rates, kept = {}, None
    for name, make in setups.items():
        conns = make()
        run_sustained(clients, min(1.0, probe_seconds), lambda t: op(conns[t], t))
        rates[name] = run_sustained(clients, probe_seconds, lambda t: op(conns[t], t)).rate
        if kept is None or rates[name] > rates[kept[0]]:
            if kept is not None:
                close_connections(kept[1])
            kept = (name, conns)
        else:
            close_connections(conns)
    return kept[1], {"etcd_setup": kept[0], "etcd_probe_rates": rates}


def close_connections(conns: list) -> None:
    for c in {id(c): c for c in conns}.values():
        c.close()
