"""TTL across a leader change (real processes, the replicas' clock driven by the test through a
file): a lease is written, the leader is SIGKILLed, and the lease's time passes while the group
elects a new leader. The lease expires at the first entry the new leader proposes, before that
entry's own command: on every replica, including the old leader once restarted, the removal is
the change at the same cursor (log index, position), as each replica's own watch reports it."""
import time

import pytest

from logtide import connect_meta
from logtide.errors import LogtideError

from meta_clock import T0, ManualClock
from meta_cluster import MetaCluster, wait_ready

LO, HI = "lease/", "other0"    # the watched range: lease/... and other/...


def _watch(cluster, i, after=None):
    c = connect_meta(cluster.addr(i), timeout=30, follow_leader=False)
    return c, c.watch(LO, HI, after=after)


def _events_until(w, pred, deadline=30.0):
    out, end = [], time.monotonic() + deadline
    while not any(pred(e) for e in out):
        assert time.monotonic() < end, f"no such event; got {out}"
        ev = w.get(timeout=0.2)
        if ev is not None:
            out.append(ev)
    return out


@pytest.mark.timeout(180)
def test_a_lease_expiring_during_a_leader_change_expires_at_the_same_entry_everywhere(tmp_path):
    clock = ManualClock(T0)
    clock.share(tmp_path / "clock")
    cluster = MetaCluster(tmp_path, clock_file=tmp_path / "clock")
    opened = []
    try:
        wait_ready(cluster)
        old = cluster.leader()
        watches = {i: _watch(cluster, i) for i in (1, 2, 3)}
        opened += [c for c, _w in watches.values()]
        with connect_meta(cluster.addrs(), timeout=30) as c:
            _p, lease = c.upsert("lease/a", b"held", ttl_ms=3000)
            c.upsert("lease/b", b"long", ttl_ms=600_000)
            assert lease.meta.expire_at_ms == T0 + 3000
        put = {i: _events_until(w, lambda e: e.key == "lease/b")[0] for i, (_c, w) in watches.items()}
        assert len({e.cursor for e in put.values()}) == 1, put

        cluster.kill(old)                     # the leader goes; the lease's time passes meanwhile
        clock.t = T0 + 5000
        survivors = [i for i in (1, 2, 3) if i != old]
        end = time.monotonic() + 60
        while True:   # the first write of the new leader: its entry carries T0 + 5000
            try:
                with connect_meta(",".join(cluster.addr(i) for i in survivors), timeout=10) as c:
                    c.upsert("other/1", b"first write after the change")
                break
            except LogtideError:
                assert time.monotonic() < end, "no new leader"
        new = cluster.leader()
        assert new != old

        def removal(events):
            return next(e for e in events if e.key == "lease/a" and e.current is None)

        seen = {}
        for i in survivors:
            evs = _events_until(watches[i][1], lambda e: e.key == "other/1")
            gone, first = removal(evs), next(e for e in evs if e.key == "other/1")
            assert gone.prev.data == b"held" and gone.prev.seq == lease.seq
            # expiry runs before the entry's command: same entry, earlier position
            assert gone.index == first.index and gone.pos < first.pos, (gone, first)
            seen[i] = (gone.cursor, first.cursor)
        assert len(set(seen.values())) == 1, seen

        cluster.start(old)                    # the old leader catches up and reports the same
        c_old, w_old = None, None
        end = time.monotonic() + 60
        while w_old is None:
            try:
                c_old, w_old = _watch(cluster, old, after=put[old].cursor)
            except LogtideError:
                assert time.monotonic() < end, "the old leader did not come back"
                time.sleep(0.2)
        opened.append(c_old)
        evs = _events_until(w_old, lambda e: e.key == "other/1")
        seen[old] = (removal(evs).cursor, next(e for e in evs if e.key == "other/1").cursor)
        assert len(set(seen.values())) == 1, seen
        cluster.wait_applied(cluster.status(new).commit_index)
        for i in (1, 2, 3):                   # each replica's own state: only the long lease is left
            with connect_meta(cluster.addr(i), timeout=30, follow_leader=False) as c:
                assert [k for k, _v in c.list(LO, consistency="stale")] == ["lease/b"]
        print(f"ttl failover: lease/a removed at entry {seen[old][0][0]} (position {seen[old][0][1]}) on every "
              f"replica, the new leader's first entry; old leader {old}, new leader {new}")
    finally:
        for c in opened:
            c.close()
        cluster.stop()
