"""Callers of the log service run unchanged against the replicated one: a TN commits, flushes and
checkpoints (truncate, reader reports) on `connect_logservice("h1:p1,h2:p2,h3:p3")`; after its
leader replica is gone, a new TN rebuilt from the replicated log and the objects has every commit."""
import socket

import pytest

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice.replicated import ReplicatedLogService
from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.objectstore import ObjectStore


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.timeout(120)
def test_tn_on_a_replicated_log_survives_losing_the_leader(tmp_path):
    peers = {i: f"127.0.0.1:{p}" for i, p in zip((1, 2, 3), free_ports(3))}
    reps = {i: ReplicatedLogService.open(tmp_path / f"r{i}", i, peers, peers[i], tick_interval=0.05) for i in peers}
    addrs = ",".join(peers.values())
    try:
        tn = TransactionNode(connect_logservice(addrs), ObjectStore(tmp_path / "objects"))
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        for i in range(60):
            x = tn.begin()
            x.insert("t", {"id": [i], "v": [i * 7]})
            if i % 5 == 4:
                x.delete("t", [i - 2])
            x.commit()
            if i == 25:
                tn.flush()
            if i == 40:
                tn.checkpoint_now()
        assert tn.log.get_truncated_lsn() > 0
        tn.close()
        tn.log.close()
        lead = next(i for i, r in reps.items() if r.node.is_leader())
        reps.pop(lead).close()
        tn = TransactionNode(connect_logservice(addrs), ObjectStore(tmp_path / "objects"))
        exp = {}
        for i in range(60):
            exp[i] = i * 7
            if i % 5 == 4:
                exp.pop(i - 2, None)
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        got = {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
        assert got == exp
        cn.close()
        tn.close()
        tn.log.close()
    finally:
        for r in reps.values():
            r.close()
