"""Real processes: the leader of a replicated log is SIGKILLed in the middle of membership changes
(a learner added, promoted, an old voter removed), while clients append. Each change ends in the
membership asked for, the replicas agree, and every acknowledged append is in the log exactly
once, at its LSN."""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice.replicated_client import NoLeaderError, ReplicatedLogServiceClient
from logtide.engine.raft.messages import ADD_LEARNER, ADD_VOTER, REMOVE
from logtide.errors import LogtideError

from replica_logs import replica_logs, settled_leader  # noqa: E402
from test_logservice_raft_kill import Cluster  # noqa: E402


def _change_while_killing_the_leader(cluster, admin, op, node, address, rng):
    """Start the change, SIGKILL the leader a few ms later (before, during or just after the
    change commits), restart it, and return what the change returned."""
    lead = cluster.leader()
    got = {}

    def change():
        try:
            got["index"] = admin.change_membership(op, node, address)
        except Exception as exc:  # reported below with the round
            got["error"] = exc

    t = threading.Thread(target=change)
    t.start()
    time.sleep(rng.uniform(0.0, 0.03))
    cluster.kill(lead)
    t.join(timeout=60)
    assert not t.is_alive(), "the membership change did not end within its deadline"
    cluster.start(lead)
    assert "error" not in got, f"change {op}:{node} failed after the leader was killed: {got['error']!r}"
    return lead


def test_leader_killed_mid_membership_change_under_load(tmp_path):
    rng = random.Random(2211)
    cluster = Cluster(tmp_path)
    cluster.start_joiner(4)
    founders = ",".join(cluster.addr(i) for i in (1, 2, 3))
    admin = ReplicatedLogServiceClient([cluster.addr(i) for i in (1, 2, 3, 4)], deadline=20.0, call_timeout=1.0)
    stop = threading.Event()
    acked, lock = {}, threading.Lock()

    def writer(w):
        c = connect_logservice(founders + "," + cluster.addr(4), deadline=10.0, call_timeout=1.0)
        k = 0
        while not stop.is_set():
            payload = b"k%d-%d" % (w, k)
            k += 1
            try:
                lsn = c.append(payload)
            except NoLeaderError:
                continue  # timed out: may or may not have taken effect
            with lock:
                acked[payload] = lsn
        c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    removed = None
    try:
        cluster.leader()
        for t in threads:
            t.start()
        time.sleep(0.3)
        # 1. a learner is added while the leader dies
        _change_while_killing_the_leader(cluster, admin, ADD_LEARNER, 4, cluster.addr(4), rng)
        cluster.wait_caught_up(4)  # the learner catches up before it is promoted
        # 2. it is promoted while the leader dies
        _change_while_killing_the_leader(cluster, admin, ADD_VOTER, 4, "", rng)
        # 3. an old voter is removed while the leader dies (the victim is a follower at the start)
        lead = cluster.leader()
        removed = next(i for i in (1, 2, 3) if i != lead)
        _change_while_killing_the_leader(cluster, admin, REMOVE, removed, "", rng)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    try:
        lead, st = settled_leader(cluster)
        voters = sorted({1, 2, 3, 4} - {removed})
        assert sorted(st["voters"]) == voters and not st["learners"], st
        cluster.kill(removed)
        del cluster.ports[removed]
        assert len(acked) > 50, f"only {len(acked)} appends were acknowledged"
        for i in voters:  # a replica restarted last may still be binding its port
            end = time.monotonic() + 30
            while True:
                try:
                    cluster.status(i)
                    break
                except LogtideError:
                    assert time.monotonic() < end, f"replica {i} did not come back"
                    time.sleep(0.05)
        logs = replica_logs(cluster, st["commit"])
        first = logs[voters[0]]
        assert all(logs[i] == first for i in voters), "replicas disagree about the log"
        at = {}
        for lsn, payload in first:
            assert payload not in at, f"{payload!r} stored twice (LSNs {at[payload]} and {lsn})"
            at[payload] = lsn
        bad = {p: (lsn, at.get(p)) for p, lsn in acked.items() if at.get(p) != lsn}
        assert not bad, f"{len(bad)} acknowledged appends are not at their LSN: {dict(list(bad.items())[:8])}"
    finally:
        admin.close()
        cluster.stop()
        for p in cluster.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
