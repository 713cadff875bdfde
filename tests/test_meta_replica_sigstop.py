"""SIGSTOP of the meta-service leader (real processes): it keeps its sockets but answers nothing.

- Clients move on: one pinned to a follower gets writes acknowledged by a new leader within about
  an election timeout; clients that followed the old leader see their in-flight call end in a typed
  error by its deadline, and their next calls reach the new leader.
- Thawed (SIGCONT), the old leader steps down and serves nothing stale: a linearizable read and a
  write queued on its sockets while it was stopped are answered with the new leader's state (the
  value written after the stop), never the old one; it then follows the new leader's term.
- Every acknowledged write is there afterwards.
"""
import threading
import time

import pytest

from logtide import connect_meta
from logtide.errors import MetaError

from meta_cluster import TICK, MetaCluster, wait_ready

ELECTION_MAX = 2 * 6 * float(TICK)   # the randomized election timeout is at most 2 x 6 ticks
CALL_TIMEOUT = 1.0
SLACK = 2.0                          # a loaded 2-core machine


class _Writer(threading.Thread):
    def __init__(self, name, addrs, follow_leader):
        super().__init__(daemon=True)
        self.name_, self.addrs, self.follow = name, addrs, follow_leader
        self.acks, self.errors, self.acked = [], [], {}
        self.stop = threading.Event()

    def run(self):
        n = 0
        with connect_meta(self.addrs, timeout=CALL_TIMEOUT, follow_leader=self.follow) as c:
            while not self.stop.is_set():
                n += 1
                key = f"s/{self.name_}/{n}"
                t0 = time.monotonic()
                try:
                    c.upsert(key, b"%d" % n)
                    self.acks.append((t0, time.monotonic()))
                    self.acked[key] = b"%d" % n
                except MetaError as exc:
                    self.errors.append((type(exc).__name__, time.monotonic() - t0))

    def first_ack_after(self, t):
        """When the first call started after `t` was acknowledged (None: none yet)."""
        return next((done for start, done in list(self.acks) if start > t), None)


def _until(what, fn, deadline=30.0):
    end = time.monotonic() + deadline
    while not fn():
        assert time.monotonic() < end, what
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_a_stopped_leader_is_replaced_and_thawed_serves_nothing_stale(tmp_path):
    cluster = MetaCluster(tmp_path)
    writers = []
    try:
        wait_ready(cluster)
        old = cluster.leader()
        old_term = cluster.status(old).term
        follower = next(i for i in (1, 2, 3) if i != old)
        writers = [_Writer("pinned", cluster.addr(follower), False)] + \
                  [_Writer(f"follow{w}", cluster.addrs(), True) for w in range(2)]
        for w in writers:
            w.start()
        _until("no write before the stop", lambda: all(len(w.acks) >= 20 for w in writers))
        on_old = connect_meta(cluster.addr(old), timeout=30, follow_leader=False)   # connected before the stop
        on_old.upsert("x", b"before the stop")

        cluster.freeze(old)
        t_stop = time.monotonic()
        _until("the clients did not move on", lambda: all(w.first_ack_after(t_stop) for w in writers),
               deadline=CALL_TIMEOUT + 30)
        moved = {w.name_: w.first_ack_after(t_stop) - t_stop for w in writers}
        new = cluster.leader()
        assert new != old
        with connect_meta(cluster.addr(new), timeout=30) as c:
            c.upsert("x", b"after the stop")

        # a linearizable read and a write, sent to the stopped old leader: queued on its sockets
        got = {}

        def read_on_old():
            try:
                got["x"] = on_old.get("x")
                got["put"] = on_old.upsert("y", b"queued on the stopped leader")
            except MetaError as exc:
                got["error"] = exc
            got["t"] = time.monotonic()

        reader = threading.Thread(target=read_on_old, daemon=True)
        reader.start()
        time.sleep(0.5)
        assert reader.is_alive(), "the stopped leader answered"
        t_thaw = time.monotonic()
        cluster.thaw(old)
        reader.join(40)
        assert "error" not in got, got.get("error")
        assert got["x"].data == b"after the stop", "the thawed old leader served a stale read"
        st = cluster.status(old)
        _until("the old leader did not step down", lambda: cluster.status(old).role == "follower"
               and cluster.status(old).term > old_term)

        for w in writers:
            w.stop.set()
        for w in writers:
            w.join(30)
        with connect_meta(cluster.addrs(), timeout=30) as c:
            state = {k: v.data for k, v in c.list("s/")}
            assert c.get("y").data == b"queued on the stopped leader"
        for w in writers:
            lost = [k for k, v in w.acked.items() if state.get(k) != v]
            assert not lost, f"{w.name_}: acknowledged writes lost: {lost[:5]}"
            late = [e for e in w.errors if e[1] > CALL_TIMEOUT + SLACK]
            assert not late, f"{w.name_}: calls that ended past their deadline: {late[:5]}"
        # the pinned client reaches the new leader through its follower: about an election
        assert moved["pinned"] <= ELECTION_MAX + SLACK, moved
        # the others wait out the call in flight on the stopped leader first
        assert max(moved.values()) <= CALL_TIMEOUT + ELECTION_MAX + SLACK, moved
        print(f"sigstop: clients moved on after {', '.join(f'{k} {v:.2f} s' for k, v in moved.items())} "
              f"(election timeout {ELECTION_MAX / 2:g}-{ELECTION_MAX:g} s, call deadline {CALL_TIMEOUT:g} s); "
              f"thawed old leader answered the queued read in {got['t'] - t_thaw:.2f} s "
              f"(term {old_term} -> {st.term}); errors {sorted({e for w in writers for e, _ in w.errors})}")
        on_old.close()
    finally:
        for w in writers:
            w.stop.set()
        for i in cluster.procs:
            cluster.thaw(i)     # harmless on a running replica; a stopped one would not see SIGTERM
        cluster.stop()
