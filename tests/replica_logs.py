"""Every replica's own copy of a replicated log (stale reads, each replica alone), up to the
leader's commit once each has applied it."""
import time

from logtide.engine.logservice import connect_logservice
from logtide.errors import LogtideError


def replica_logs(cluster, target: int | None = None, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """{replica id: [(lsn, payload)]} of every replica's copy up to `target` (default: the commit
    index of a settled leader, which covers every acknowledged append)."""
    if target is None:
        target = settled_leader(cluster)[1]["commit"]
    logs = {}
    for i in cluster.ports:
        end = time.monotonic() + timeout
        while cluster.status(i, timeout=2)["applied"] < target:
            if time.monotonic() > end:
                raise AssertionError(f"replica {i} did not apply up to {target} within {timeout:g} s")
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
    return logs


def settled_leader(cluster, deadline=30.0):
    """(leader, its status) once that leader has committed an entry of its own term. Only then does
    its commit index cover every append acknowledged before: a new leader learns how far the old
    one committed with its first entry (a ReadIndex barrier on it is answered only after that)."""
    end = time.monotonic() + deadline
    while True:
        lead = cluster.leader(max(0.1, end - time.monotonic()))
        before = cluster.status(lead)
        c = connect_logservice(cluster.addr(lead) + ",", deadline=10.0)
        try:
            c.get_latest_lsn()  # the barrier
        except LogtideError:
            pass
        finally:
            c.close()
        st = cluster.status(lead)
        if st["role"] == "leader" and st["term"] == before["term"] and before["role"] == "leader":
            return lead, st
        assert time.monotonic() < end, "no leader settled within the deadline"
