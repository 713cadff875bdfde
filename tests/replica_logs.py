"""Every replica's own copy of a replicated log (stale reads, each replica alone), up to the
leader's commit once each has applied it."""
import time

from logtide.engine.logservice import connect_logservice


def replica_logs(cluster, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """{replica id: [(lsn, payload)]} of every replica's copy up to the leader's commit index."""
    target = cluster.status(cluster.leader())["commit"]
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
