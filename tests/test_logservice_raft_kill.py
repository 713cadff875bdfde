"""Real processes: three `logtide logservice serve --raft` replicas on loopback, clients appending
(and reading, and taking TSO ranges) concurrently while replicas are SIGKILLed: the leader, a
follower, and all three at once, 21 rounds. Afterwards every acknowledged append is present exactly
once, at the same LSN on every replica, no LSN ever held two records, and the recorded client
history is linearizable (lincheck)."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice.replicated_client import NoLeaderError
from logtide.engine.raft.lincheck import INF, UNKNOWN, LogModel, Operation, check_operations
from logtide.errors import LogtideError

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
TICK = "0.05"  # 0.5-1 s elections keep the rounds short; the defaults are 0.1 s x 10 ticks


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    def __init__(self, tmp_path, n=3):
        self.tmp = tmp_path
        self.ports = dict(zip(range(1, n + 1), free_ports(n)))
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in self.ports.items())
        self.procs = {}
        for i in self.ports:
            self.start(i)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def start(self, i):
        log = open(self.tmp / f"replica{i}.log", "ab")
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "logservice", "serve", "--raft", "--id", str(i), "--peers", self.peers,
             "--dir", str(self.tmp / f"r{i}"), "--tick", TICK, "--stats-interval", "0"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def kill(self, i):
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    def status(self, i, timeout=0.5):
        from logtide.engine.logservice import replicated_pb2 as pb
        from logtide.engine.logservice.replicated import REPLICATED_SERVICE
        from logtide.engine.rpc import connect
        import json
        c = connect(REPLICATED_SERVICE, self.addr(i), connect_timeout=None, timeout=timeout)
        try:
            return json.loads(c.invoke("Status", pb.REmpty()).json)
        finally:
            c.close()

    def leader(self, deadline=30.0):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for i in list(self.procs):
                try:
                    if self.status(i)["role"] == "leader":
                        return i
                except LogtideError:
                    pass
            time.sleep(0.05)
        raise AssertionError("no leader within the deadline")

    def stop(self):
        for i in list(self.procs):
            self.procs[i].send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def test_sigkill_rounds_lose_no_acknowledged_append(cluster):
    history = []  # [input, call, output, return]
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.monotonic()
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)

    def writer(w):
        c = connect_logservice(addrs, deadline=8.0, call_timeout=1.0)
        k = 0
        while not stop.is_set():
            payload = b"w%d-%d" % (w, k)
            k += 1
            op = [("append", payload), time.monotonic() - t0, UNKNOWN, INF]
            with lock:
                history.append(op)
            try:
                lsn = c.append(payload)
                op[2], op[3] = lsn, time.monotonic() - t0
            except NoLeaderError:
                pass  # timed out: may or may not have taken effect
        c.close()

    def other():
        c = connect_logservice(addrs, deadline=8.0, call_timeout=1.0)
        while not stop.is_set():
            for kind in ("read", "tso"):
                op = [("read", 1) if kind == "read" else ("tso", 3), time.monotonic() - t0, UNKNOWN, INF]
                with lock:
                    history.append(op)
                try:
                    if kind == "read":
                        recs, _n = c.read(1, 8 << 20)
                        out = tuple((r.lsn, r.payload) for r in recs)
                    else:
                        out = c.get_tso_timestamp(3)
                    op[2], op[3] = out, time.monotonic() - t0
                except NoLeaderError:
                    pass
            time.sleep(0.05)
        c.close()

    cluster.leader()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)] + [threading.Thread(target=other)]
    for t in threads:
        t.start()
    try:
        rounds = ["leader"] * 9 + ["follower"] * 8 + ["all"] * 4
        for kind in rounds:
            time.sleep(0.4)
            lead = cluster.leader()
            victims = {"leader": [lead], "follower": [next(i for i in cluster.procs if i != lead)],
                       "all": list(cluster.procs)}[kind]
            for v in victims:
                cluster.kill(v)
            time.sleep(0.2)
            for v in victims:
                cluster.start(v)
        cluster.leader()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)

    acked = {op[0][1]: op[2] for op in history if op[0][0] == "append" and op[2] is not UNKNOWN}
    assert len(acked) > 50, f"only {len(acked)} appends were acknowledged"
    # every replica converges on the same log
    lead = cluster.leader()
    target = cluster.status(lead)["commit"]
    logs = {}
    for i in cluster.ports:
        end = time.monotonic() + 30
        while cluster.status(i, timeout=2)["applied"] < target and time.monotonic() < end:
            time.sleep(0.05)
        c = connect_logservice(cluster.addr(i) + ",", deadline=10.0)
        recs, nxt = [], 1
        while True:
            got, nxt2 = c.read(nxt, 8 << 20, stale=True)
            recs += got
            if nxt2 == nxt:
                break
            nxt = nxt2
        c.close()
        logs[i] = [(r.lsn, r.payload) for r in recs if r.lsn <= target]
    assert logs[1] == logs[2] == logs[3], "replicas disagree about the log"
    by_payload = {}
    for lsn, payload in logs[1]:
        assert payload not in by_payload, f"{payload!r} stored twice (LSNs {by_payload[payload]} and {lsn})"
        by_payload[payload] = lsn
    for payload, lsn in acked.items():
        assert by_payload.get(payload) == lsn, f"acknowledged {payload!r} at LSN {lsn}, log has {by_payload.get(payload)}"
    ops = [Operation(0, i, c, o, r) for i, c, o, r in history]
    res = check_operations(LogModel(), ops)
    assert res.ok, f"the client history is not linearizable (longest prefix {len(res.partial)} ops)"
