"""Network partitions of a meta-service group of real processes, cut at the byte level by loopback
TCP proxies on every replica-to-replica link (MetaCluster(proxied=True)): the leader isolated, and
one follower split from the other two. Writers on both sides run throughout.

- A write sent to the minority side ends in a typed error (MetaError) within the client's deadline;
  one refused before it was proposed (MetaNotLeader) is never applied.
- The majority side elects a leader (when it lost it) and keeps acknowledging writes.
- A follower cut off from both others stays at its term (pre-vote), so it deposes nobody on healing.
- After healing, every acknowledged write is on every replica, each replica has the same state,
  and the old leader follows the new one.
"""
import threading
import time

import pytest

from logtide import connect_meta
from logtide.errors import MetaError, MetaNotLeader

from meta_cluster import MetaCluster, wait_ready

CALL_TIMEOUT = 2.0     # each client call's deadline
SLACK = 2.0            # a loaded 2-core machine may run a call's end that much late
CUT_S = 4.0            # how long a partition lasts


class _Writers:
    """Writer threads, each on its own client and its own keys: every outcome is recorded."""

    def __init__(self):
        self.acked, self.refused, self.unknown, self.late = {}, set(), set(), []
        self.sent = {}          # acknowledged key -> when its call was sent
        self.failures = []      # (writer, error type, seconds the call took)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = []

    def start(self, name, addrs, follow_leader=False):
        t = threading.Thread(target=self._run, args=(name, addrs, follow_leader), daemon=True)
        self.threads.append(t)
        t.start()

    def _run(self, name, addrs, follow_leader):
        n = 0
        with connect_meta(addrs, timeout=CALL_TIMEOUT, follow_leader=follow_leader) as c:
            while not self.stop.is_set():
                n += 1
                key, value = f"p/{name}/{n}", b"%s-%d" % (name.encode(), n)
                t0 = time.monotonic()
                try:
                    c.upsert(key, value)
                    with self.lock:
                        self.acked[key] = value
                        self.sent[key] = t0
                except MetaError as exc:
                    took = time.monotonic() - t0
                    with self.lock:
                        (self.refused if isinstance(exc, MetaNotLeader) else self.unknown).add(key)
                        self.failures.append((name, type(exc).__name__, took))
                        if took > CALL_TIMEOUT + SLACK:
                            self.late.append((key, type(exc).__name__, took))
                    time.sleep(0.05)

    def count(self, name):
        with self.lock:
            return sum(1 for k in self.acked if k.startswith(f"p/{name}/"))

    def acked_if_sent_after(self, name, t):
        """Acknowledged writes of `name` whose call was sent at or after t."""
        with self.lock:
            return sorted(k for k in self.acked if k.startswith(f"p/{name}/") and self.sent[k] >= t)

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(CALL_TIMEOUT + 30)


def _wait_more(writers, name, n, deadline, what):
    end = time.monotonic() + deadline
    base = writers.count(name)
    while writers.count(name) < base + n:
        assert time.monotonic() < end, what
        time.sleep(0.05)


def _new_leader(cluster, among, deadline=30.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for i in among:
            try:
                if cluster.status(i).role == "leader":
                    return i
            except MetaError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no leader among {among}\n" + cluster.logs_tail())


def _verify(cluster, writers):
    """Every replica: every acknowledged write, no refused one, one identical state."""
    with connect_meta(cluster.addrs(), timeout=30) as c:
        c.upsert("p/barrier", b"after healing")
        index = c.status().commit_index
    cluster.wait_applied(index, timeout=60)
    states = {}
    for i in cluster.ports:
        with connect_meta(cluster.addr(i), timeout=30, follow_leader=False) as c:
            states[i] = {k: v.data for k, v in c.list("p/", consistency="stale")}
    assert states[1] == states[2] == states[3], "the replicas differ after healing"
    state = states[1]
    lost = [k for k, v in writers.acked.items() if state.get(k) != v]
    assert not lost, f"acknowledged writes lost: {lost[:5]}"
    applied_refused = [k for k in writers.refused if k in state]
    assert not applied_refused, f"writes refused before proposing were applied: {applied_refused[:5]}"
    assert not writers.late, f"calls that ended past their deadline: {writers.late[:5]}"


@pytest.mark.timeout(240)
def test_isolated_leader_and_a_split_follower(tmp_path):
    cluster = MetaCluster(tmp_path, proxied=True)
    writers = _Writers()
    try:
        wait_ready(cluster)
        # ---- 1. the leader isolated from both followers
        old = cluster.leader()
        rest = [i for i in (1, 2, 3) if i != old]
        writers.start("minority", cluster.addr(old))                           # pinned to the old leader
        writers.start("majority", ",".join(cluster.addr(i) for i in rest))     # the other side
        _wait_more(writers, "majority", 20, 30, "no write before the partition")
        _wait_more(writers, "minority", 20, 30, "no write on the leader before the partition")
        cluster.isolate(old)
        t_cut = time.monotonic()
        _new_leader(cluster, rest)
        elected = time.monotonic() - t_cut
        _wait_more(writers, "majority", 20, 30, "the majority side acknowledged nothing")
        stuck = writers.count("minority")
        time.sleep(CUT_S)
        assert writers.count("minority") == stuck, "the isolated old leader acknowledged a write"
        with writers.lock:
            failed_on_minority = sum(1 for k in writers.unknown | writers.refused if k.startswith("p/minority/"))
        assert failed_on_minority > 0, "no write to the isolated leader ended in a typed error"
        cluster.heal()
        _wait_more(writers, "minority", 10, 30, "the old leader's clients got nothing through after healing")
        end = time.monotonic() + 30                  # the old leader follows the leader of the majority side
        while not (cluster.status(old).role == "follower" and cluster.status(old).leader_id == cluster.leader()):
            assert time.monotonic() < end, "the old leader did not step down and follow"
            time.sleep(0.05)

        # ---- 2. one follower split from the other two
        lead = cluster.leader()
        split = next(i for i in (1, 2, 3) if i != lead)
        writers.start("split", cluster.addr(split))   # pinned: forwarded to a leader it cannot reach
        _wait_more(writers, "split", 10, 30, "no write through the follower before the split")
        for j in (1, 2, 3):
            if j != split:
                cluster.cut(split, j)
        t_split = time.monotonic()
        split_term = cluster.status(split).term
        _wait_more(writers, "majority", 20, 30, "the majority side stopped acknowledging")
        time.sleep(CUT_S)
        # a call sent before the cut may still be acknowledged (forwarded and committed before it,
        # its reply on the way to the client); none sent after it may be
        assert not writers.acked_if_sent_after("split", t_split), "a write through the split follower was acknowledged"
        with connect_meta(cluster.addr(split), timeout=CALL_TIMEOUT, follow_leader=False) as c:
            t0 = time.monotonic()
            with pytest.raises(MetaError):
                c.get("p/barrier")                     # linearizable: needs the leader
            assert time.monotonic() - t0 < CALL_TIMEOUT + SLACK
            c.get("p/majority/1", consistency="stale")   # its own applied state: served
        # pre-vote: a follower cut off never raises its term, so on healing it cannot depose the
        # majority's leader. (That leader may still lose a check-quorum round on a loaded machine;
        # each replica's log shows its role changes.)
        st = cluster.status(split)
        assert st.role != "leader" and st.term == split_term, \
            f"the split follower moved from term {split_term} to {st.term} ({st.role}) while cut off"
        cluster.heal()
        _wait_more(writers, "split", 10, 30, "the split follower's clients got nothing through after healing")
        writers.join()
        _verify(cluster, writers)
        for side in ("minority", "split"):
            f = [(e, t) for n, e, t in writers.failures if n == side]
            print(f"partition, {side} writes: {len(f)} failed, errors {sorted({e for e, _ in f})}, "
                  f"slowest {max(t for _, t in f):.2f} s (deadline {CALL_TIMEOUT:g} s)")
        print(f"partition: new leader elected {elected:.2f} s after the old one was isolated; "
              f"acked {len(writers.acked)}, refused {len(writers.refused)}, unknown {len(writers.unknown)}")
    finally:
        writers.stop.set()
        cluster.stop()
