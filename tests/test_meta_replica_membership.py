"""Membership of a meta-service group of real processes, through `logtide meta member` against
any replica: a new replica joins as a learner, catches up, is promoted, and an old member is
removed; the group then needs the new member for its quorum; at last the leader removes itself
(handing the leadership over first). Every replica keeps the same node
records (address and role, apart from Raft membership). Refused with typed errors, changing
nothing: promoting a learner that has not caught up, changes naming unknown members, and a
removal that would leave the voters without a quorum."""
import json
import subprocess
import time

import pytest

from logtide import connect_meta
from logtide.errors import LogtideError

from meta_cluster import LOGTIDE, TICK, MetaCluster, wait_ready

DEADLINE = 60.0


def _member(cluster, via, *args):
    """`logtide meta member ARGS --meta ADDR(via)`: (exit status, output)."""
    r = subprocess.run([LOGTIDE, "meta", "member", *args, "--meta", cluster.addr(via), "--timeout", "20"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def _status_json(cluster, *ids):
    r = subprocess.run([LOGTIDE, "meta", "status", "--json", *(cluster.addr(i) for i in ids)],
                       capture_output=True, text=True, timeout=60)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def _until(what, fn, deadline=DEADLINE):
    end = time.monotonic() + deadline
    while True:
        try:
            got = fn()
            if got:
                return got
        except LogtideError:
            pass
        assert time.monotonic() < end, f"{what} not within {deadline:g} s"
        time.sleep(0.1)


def _nodes_everywhere(cluster, ids, want):
    """Every replica in `ids` has exactly the node records `want` ({id: role}) at its own applied state."""
    def same():
        for i in ids:
            with connect_meta(cluster.addr(i), timeout=5, follow_leader=False) as c:
                got = {n: r.role for n, r in c.members(consistency="stale")["nodes"].items()}
            if got != want:
                return False
        return True
    _until(f"node records {want} on replicas {ids}", same)


@pytest.mark.timeout(240)
def test_learner_joins_is_promoted_and_an_old_member_is_removed(tmp_path):
    cluster = MetaCluster(tmp_path)
    try:
        wait_ready(cluster)
        lead = cluster.leader()
        f1, f2 = [i for i in (1, 2, 3) if i != lead]
        with connect_meta(cluster.addrs(), timeout=20) as c:
            for k in range(50):
                c.upsert(f"before/{k}", b"%d" % k)
            # the founders' node records, written by the leader through the log
            _nodes_everywhere(cluster, (1, 2, 3), {1: "voter", 2: "voter", 3: "voter"})

            # refused: unknown members, and a promotion of a learner that does not answer
            rc, out = _member(cluster, f1, "promote", "9")
            assert rc == 2 and "MetaUnknownMember" in out, out
            rc, out = _member(cluster, f1, "remove", "9")
            assert rc == 2 and "MetaUnknownMember" in out, out
            rc, out = _member(cluster, f2, "add", "--learner", "8=127.0.0.1:1")   # nothing serves there
            assert rc == 0 and "learners [8]" in out, out
            rc, out = _member(cluster, f2, "promote", "8")
            assert rc == 2 and "MetaMembershipRefused" in out and "not caught up" in out, out
            rc, out = _member(cluster, lead, "remove", "8")     # a learner: no quorum at stake
            assert rc == 0 and "learners []" in out, out

            # replica 4 joins as a learner (asked through a follower), catches up, is promoted
            cluster.add(4)
            rc, out = _member(cluster, f1, "add", "--learner", f"4={cluster.addr(4)}")
            assert rc == 0 and "learners [4]" in out, out
            top = c.status().commit_index
            cluster.wait_applied(top, ids=[4], timeout=DEADLINE)
            with connect_meta(cluster.addr(4), timeout=5, follow_leader=False) as c4:
                assert c4.get("before/49", consistency="stale").data == b"49"
            rc, out = _member(cluster, f2, "promote", "4")
            assert rc == 0 and "voters [1, 2, 3, 4]" in out, out

            # an old follower is removed (asked through the new member) and stopped
            rc, out = _member(cluster, 4, "remove", str(f1))
            assert rc == 0 and f"voters {sorted({1, 2, 3, 4} - {f1})}" in out, out
            cluster.kill(f1)
            _nodes_everywhere(cluster, (lead, f2, 4), {lead: "voter", f2: "voter", 4: "voter"})

            # the new voter counts: with f2 down too, the leader and 4 are the quorum
            cluster.kill(f2)
            c.upsert("after/1", b"quorum with the new member")
            assert c.get("after/1").data == b"quorum with the new member"
            # the leader marks a voter inactive only at its check-quorum round, once per election
            # timeout (6 ticks): wait past two such rounds since the kill, so that it has seen f2 go
            time.sleep(3 * 6 * float(TICK))
            # removing 4 now would leave {lead, f2} with only the leader answering: refused
            rc, out = _member(cluster, lead, "remove", "4")
            assert rc == 2 and "MetaMembershipRefused" in out and "lose quorum" in out, out
            c.upsert("after/2", b"still serving")
            m = c.members()
            assert m["voters"] == sorted([lead, f2, 4]) and m["learners"] == []
            assert {n: (r.address, r.role) for n, r in m["nodes"].items()} == {
                lead: (cluster.addr(lead), "voter"), f2: (cluster.addr(f2), "voter"), 4: (cluster.addr(4), "voter")}
            rows = _status_json(cluster, lead, 4)
            assert all(r.get("voters") == sorted([lead, f2, 4]) for r in rows), rows
            assert all(sorted(r["nodes"]) == sorted(str(i) for i in (lead, f2, 4)) for r in rows), rows

            # the leader removes itself: it hands the leadership to a voter that stays first
            cluster.start(f2)
            cluster.wait_applied(c.status().commit_index, ids=[f2], timeout=DEADLINE)
            rc, out = _member(cluster, lead, "remove", str(lead))
            assert rc == 0 and f"voters {sorted([f2, 4])}" in out, out
            cluster.kill(lead)
            assert c.get("after/2").data == b"still serving"   # a read moves the client off the dead replica
            c.upsert("after/3", b"without the old leader")
            assert c.get("after/3").data == b"without the old leader"
            _nodes_everywhere(cluster, (f2, 4), {f2: "voter", 4: "voter"})
    finally:
        cluster.stop()
