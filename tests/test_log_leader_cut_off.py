"""Real processes: a TN, then a primary, writing on three `logtide logservice serve --raft` replicas,
which each reaches through loopback TCP proxies, while the proxy to the leader blackholes its
traffic (or mutes it: the writer's requests land, their answers never come). The replicas still
reach each other, so the leader stays leader and the writer cannot write:
- every commit or insert ends within the log's deadline in a typed error; none hangs, and commits
  queued on the TN's commit lock fail together rather than one deadline each in turn;
- a writer whose log write failed refuses writes at once (its memory may be ahead of its log);
- reopened on the same log once the cut heals (held bytes then flow, and a late append may land),
  it has every acknowledged write, each failed one whole or not at all, and nothing else, and the
  replicas hold the same log;
- a TN cut off while idle (its heartbeats fail), or whose replicas are all SIGSTOPped or
  SIGKILLed, commits again after the heal and its CN sees it.
"""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from frozen import freeze, thaw  # noqa: E402
from tcp_proxy import TcpProxy  # noqa: E402
from test_logservice_raft_kill import Cluster  # noqa: E402
from replica_logs import replica_logs  # noqa: E402

from logtide.engine.logservice import connect_logservice  # noqa: E402
from logtide.engine.logtail import ComputeNode, TransactionNode  # noqa: E402
from logtide.engine.objectstore import ObjectStore  # noqa: E402
from logtide.errors import GroupCommitFailed, LogtideError  # noqa: E402
from logtide.replay.primary import Primary  # noqa: E402

WRITERS = 8
DEADLINE = 3.0        # the log client's deadline for one call, across leader changes
CALL_S = 1.0          # one RPC to one replica
SLACK = 10.0          # a loaded 2-core machine


class Group:
    """Three replicas, a proxy in front of each, and what the test opened on them (closed at the end)."""

    def __init__(self, tmp_path) -> None:
        # 1-2 s elections (the last --tick wins): the leader must stay leader through a cut on a busy machine
        self.cluster = Cluster(tmp_path, extra=("--tick", "0.1"))
        self.proxies = {i: TcpProxy(self.cluster.addr(i)) for i in self.cluster.ports}
        self.opened: list = []

    def open(self, thing):
        self.opened.append(thing)
        return thing

    def log_through_proxies(self):
        """A log client that reaches each replica through its proxy."""
        self.cluster.leader()
        return self.open(connect_logservice(",".join(p.address for p in self.proxies.values()),
                                            deadline=DEADLINE, call_timeout=CALL_S))

    def direct_log(self):
        return self.open(connect_logservice(",".join(self.cluster.addr(i) for i in self.cluster.ports),
                                            deadline=30.0))

    def cut_leader(self, how: str = "blackhole") -> int:
        """Blackhole the leader's proxy, or mute it: the writer's requests land, the answers never come."""
        lead = self.cluster.leader()
        if how == "mute":
            self.proxies[lead].mute_replies(True)
        else:
            self.proxies[lead].blackhole(True)
        return lead

    def all_down(self, how: str) -> None:
        """Every replica at once: SIGSTOPped (frozen, sockets held) or SIGKILLed."""
        for i in list(self.cluster.procs):
            if how == "stop":
                freeze(self.cluster.procs[i].pid)
            else:
                self.cluster.kill(i)

    def all_up(self, how: str) -> None:
        for i in self.cluster.ports:
            if how == "stop":
                thaw(self.cluster.procs[i].pid)
            else:
                self.cluster.start(i)     # same directory, same port: the proxies reach it again

    def heal(self) -> None:
        for p in self.proxies.values():
            p.blackhole(False)        # held bytes flow: a late append may commit now
            p.mute_replies(False)

    def same_log_everywhere(self) -> None:
        logs = replica_logs(self.cluster)
        assert logs[1] == logs[2] == logs[3], "the replicas disagree about the log"

    def close(self) -> None:
        for p in self.cluster.procs.values():
            thaw(p.pid)                   # a frozen replica would not stop on SIGTERM
        for thing in reversed(self.opened):
            try:
                thing.close()
            except LogtideError:
                pass
        for p in self.proxies.values():
            p.close()
        self.cluster.stop()


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path)
    yield g
    g.close()


def commit_once_healed(tn, ids, timeout=30.0) -> int:
    """Commit rows `ids` (v = id), retrying while the log client still passes over the healed leader."""
    end = time.monotonic() + timeout
    while True:
        try:
            x = tn.begin()
            x.insert("t", {"id": ids, "v": ids})
            return x.commit()
        except LogtideError:
            assert time.monotonic() < end, "the TN does not commit after the cut healed"


def cn_rows(tn, ts) -> dict:
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    try:
        cn.subscribe("t")
        return {r["id"]: r["v"] for r in cn.read("t", ts, timeout=20).to_pylist()}
    finally:
        cn.close()


class Writers:
    """WRITERS threads, each calling write(k) for its own keys k: each write's outcome is
    acknowledged, (k, result), or failed, k (a typed error: it may or may not be in the log)."""

    def __init__(self, write) -> None:
        self.write = write
        self.acked: list[tuple[int, object]] = []
        self.failed: list[int] = []
        self.errors: list[BaseException] = []      # anything that is not a LogtideError
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(WRITERS)]
        for t in self._threads:
            t.start()

    def _run(self, w: int) -> None:
        k = w + 1
        while True:
            try:
                out = self.write(k)
                with self._lock:
                    self.acked.append((k, out))
            except LogtideError:
                with self._lock:
                    self.failed.append(k)
                return                       # the writer is failed: this thread is done
            except BaseException as exc:    # noqa: BLE001 - recorded, the test fails on it
                with self._lock:
                    self.errors.append(exc)
                return
            k += WRITERS

    def cut_and_wait(self, group: "Group", how: str) -> None:
        """Cut the leader off; every writer ends in a typed error within the bound, and the leader
        stays leader."""
        time.sleep(1.5)
        assert self.acked, "nothing written before the cut"
        cut_at = time.monotonic()
        lead = group.cut_leader(how)
        end = cut_at + DEADLINE * 2 + SLACK   # each waits one deadline, not one per writer ahead of it
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        alive = [t for t in self._threads if t.is_alive()]
        assert not alive, f"{len(alive)} writers still writing {time.monotonic() - cut_at:.1f} s after the cut"
        assert not self.errors, f"untyped errors: {self.errors[:3]}"
        assert len(self.failed) == WRITERS, "every writer ends in a typed error"
        assert group.cluster.leader() == lead, "the leader was cut off from the writer only"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["blackhole", "mute"])
def test_tn_cut_off_from_the_log_leader_fails_typed_and_recovers_whole(group, tmp_path, how):
    tn = group.open(TransactionNode(group.log_through_proxies(), ObjectStore(tmp_path / "objects")))
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")

    def commit(k):   # rows k and -k in one transaction
        x = tn.begin()
        x.insert("t", {"id": [k, -k], "v": [k * 3, -k * 3]})
        x.commit()

    writers = Writers(commit)
    writers.cut_and_wait(group, how)
    if tn.committer.failed is not None:
        # a commit was queued when the log went (else all failed taking a ts): the TN is failed,
        # and a new transaction is refused at once, not after another deadline
        t0 = time.monotonic()
        with pytest.raises(GroupCommitFailed):
            tn.begin()
        assert time.monotonic() - t0 < DEADLINE
    group.heal()
    tn.close()

    tn2 = group.open(TransactionNode(group.direct_log(), ObjectStore(tmp_path / "objects")))
    ts = commit_once_healed(tn2, [10 ** 9])       # the reopened TN commits
    got = cn_rows(tn2, ts)
    assert got.pop(10 ** 9) == 10 ** 9
    for k, _ in writers.acked:
        assert got.get(k) == k * 3 and got.get(-k) == -k * 3, f"acknowledged commit {k} lost"
    for k in writers.failed:
        assert (k in got) == (-k in got), f"failed commit {k} half there"
    keys = [k for k, _ in writers.acked] + writers.failed
    allowed = set(keys) | {-k for k in keys}
    assert set(got) <= allowed, f"rows nobody wrote: {sorted(set(got) - allowed)[:5]}"
    group.same_log_everywhere()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["blackhole", "mute"])
def test_primary_cut_off_from_the_log_leader_fails_typed_and_recovers_whole(group, tmp_path, how):
    d, rel = tmp_path / "shared", 16384
    prim = group.open(Primary(d, log=group.log_through_proxies(), checkpoint_interval=0.2, pool_pages=64))
    writers = Writers(lambda k: prim.insert(rel, b"row %d" % k))
    writers.cut_and_wait(group, how)
    assert prim.stopped
    t0 = time.monotonic()
    with pytest.raises(LogtideError):
        prim.insert(rel, b"after the failure")
    assert time.monotonic() - t0 < DEADLINE, "a stopped primary waited on the log again"
    group.heal()
    prim.close()

    prim2 = group.open(Primary(d, log=group.direct_log(), checkpoint_interval=0.2, pool_pages=64))
    tid = prim2.insert(rel, b"reopened")
    got = {data: t for t, data in prim2.scan(rel)}
    assert got.pop(b"reopened") == tid
    for k, t in writers.acked:
        assert got.get(b"row %d" % k) == tuple(t), f"acknowledged insert {k} lost or moved"
    allowed = {b"row %d" % k for k, _ in writers.acked} | {b"row %d" % k for k in writers.failed}
    assert set(got) <= allowed, f"tuples nobody wrote: {sorted(set(got) - allowed)[:5]}"
    group.same_log_everywhere()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["blackhole", "stop", "kill"])
def test_tn_idle_through_a_cut_serves_its_cns_after_it(group, tmp_path, how):
    """Cut off with nothing to commit (the leader blackholed, or every replica SIGSTOPped or
    SIGKILLed), the TN's heartbeats fail past the log's deadline; healed (thawed, restarted), it
    commits again and its CN sees every commit (the push thread outlived the failed heartbeats)."""
    tn = group.open(TransactionNode(group.log_through_proxies(), ObjectStore(tmp_path / "objects")))
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    cn = group.open(ComputeNode(lambda: tn.connect("cn"), tn.store))
    cn.subscribe("t")
    x = tn.begin()
    x.insert("t", {"id": [1], "v": [1]})
    ts1 = x.commit()
    assert {r["id"]: r["v"] for r in cn.read("t", ts1).to_pylist()} == {1: 1}
    if how == "blackhole":
        group.cut_leader()
    else:
        group.all_down(how)
    time.sleep(DEADLINE * 2 + 1)           # heartbeats fail: no leader answers within the deadline
    if how == "blackhole":
        group.heal()
    else:
        group.all_up(how)
    ts2 = commit_once_healed(tn, [2])
    assert {r["id"]: r["v"] for r in cn.read("t", ts2, timeout=20).to_pylist()} == {1: 1, 2: 2}


@pytest.mark.timeout(180)
def test_commits_queued_on_the_commit_lock_fail_within_one_deadline(group, tmp_path):
    """WRITERS transactions commit at once while the log is cut off: each takes its commit ts from
    the log under the commit lock, so all but one wait for the lock. The first one's call fails at
    the log's deadline and the others fail with it, instead of each waiting a whole deadline in
    turn. Nothing of theirs is logged; healed, the TN (not failed: nothing was queued) commits."""
    tn = group.open(TransactionNode(group.log_through_proxies(), ObjectStore(tmp_path / "objects")))
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    txns = []
    for k in range(1, WRITERS + 1):
        x = tn.begin()
        x.insert("t", {"id": [k], "v": [k]})
        txns.append(x)
    group.cut_leader()
    took: dict[int, tuple[float, BaseException | None]] = {}

    def commit(k, x):
        t0 = time.monotonic()
        try:
            x.commit()
            took[k] = (time.monotonic() - t0, None)
        except BaseException as exc:  # noqa: BLE001 - checked below
            took[k] = (time.monotonic() - t0, exc)

    threads = [threading.Thread(target=commit, args=(k, x)) for k, x in enumerate(txns, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE * WRITERS + SLACK)
    assert len(took) == WRITERS, "a commit still waits"
    assert all(isinstance(e, LogtideError) for _, e in took.values()), took
    slowest = max(s for s, _ in took.values())
    assert slowest < DEADLINE * 2 + SLACK, f"a commit took {slowest:.1f} s: deadlines stacked on the lock"
    assert tn.committer.failed is None
    group.heal()
    ts = commit_once_healed(tn, [100])
    assert cn_rows(tn, ts) == {100: 100}
