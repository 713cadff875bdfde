"""RaftNode: three replicas with DiskStorage over the framed carrier on 127.0.0.1, driven by their threads:
replication, ReadIndex, leader loss, restart from disk, snapshot catch-up, membership and transfer."""
import json
import threading
import time

import pytest

from logtide.engine.raft import ADD_LEARNER, ADD_VOTER, REMOVE, ConfChange
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.errors import MembershipRefused, NotLeader, ProposalDropped, RaftTimeout
from logtide.engine.nodehost.node import RaftNode
from logtide.engine.nodehost.transport import RAFT_SERVICE
from logtide.engine.rpc.wire_server import WireServer
from logtide.engine.statemachine import StateMachine


class ListMachine(StateMachine):
    """Appends each command to a list; update returns the list's length."""

    def __init__(self):
        self.items, self.index = [], 0

    def update(self, entry):
        self.items.append(entry.cmd)
        self.index = entry.index
        return len(self.items)

    def lookup(self, query):
        return list(self.items)

    def save_snapshot(self, out):
        out.write(json.dumps({"items": [i.decode() for i in self.items], "index": self.index}).encode())
        return self.index

    def recover_from_snapshot(self, src):
        s = json.loads(src.read())
        self.items, self.index = [i.encode() for i in s["items"]], s["index"]
        return self.index

    def close(self):
        pass


class Group:
    def __init__(self, tmp_path, ids=(1, 2, 3), **kw):
        self.tmp, self.kw = tmp_path, kw
        self.servers, self.nodes, self.sms, self.ports = {}, {}, {}, {}
        for i in ids:
            s = WireServer("127.0.0.1:0")
            self.ports[i] = None
            self.servers[i] = s
        self.founders = list(ids)
        for i in ids:
            self.start(i, founding=True)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def start(self, i, founding=False, peers=None):
        sm = ListMachine()
        st = DiskStorage.open(self.tmp / f"n{i}", voters=self.founders if founding else None)
        server = self.servers.get(i)
        if server is None or self.ports.get(i) is not None:
            server = WireServer(f"127.0.0.1:{self.ports.get(i) or 0}")
            self.servers[i] = server
        node = RaftNode(i, st, sm, tick_interval=0.02, election_tick=10, seed=i, **self.kw)
        server.add_service(RAFT_SERVICE, node.transport.servicer)
        self.ports[i] = server.start()
        self.nodes[i], self.sms[i] = node, sm
        return node

    def wire(self):
        for i, n in self.nodes.items():
            for j in self.nodes:
                if j != i:
                    n.addresses[j] = self.addr(j)
                    n.transport.set_peer(j, self.addr(j))

    def run(self):
        self.wire()
        for n in self.nodes.values():
            n.start()
        return self

    def kill(self, i):
        self.nodes[i].stop()
        self.servers[i].stop(0)
        self.nodes[i].storage.close()
        del self.nodes[i]

    def leader(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ls = [i for i, n in self.nodes.items() if n.is_leader()]
            if len(ls) == 1:
                return ls[0]
            time.sleep(0.01)
        raise AssertionError("no single leader")

    def propose(self, cmd, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            lead = self.leader(max(0.1, deadline - time.monotonic()))
            try:
                return self.nodes[lead].propose(cmd, timeout=2.0)
            except (NotLeader, ProposalDropped, RaftTimeout):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def converge(self, n_items, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(sm.items) >= n_items for i, sm in self.sms.items() if i in self.nodes):
                return
            time.sleep(0.01)
        raise AssertionError({i: len(sm.items) for i, sm in self.sms.items()})

    def close(self):
        for i in list(self.nodes):
            self.kill(i)
        for s in self.servers.values():
            s.stop(0)


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path).run()
    yield g
    g.close()


def test_concurrent_proposals_replicate_in_one_order(group):
    results = []

    def client(c):
        for k in range(20):
            results.append(group.propose(b"c%d-%d" % (c, k)))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    group.converge(80)
    items = [sm.items for sm in group.sms.values()]
    assert items[0] == items[1] == items[2] and sorted(items[0]) == sorted(b"c%d-%d" % (c, k) for c in range(4) for k in range(20))
    assert sorted(r[1] for r in results) == list(range(1, 81))  # each acknowledged once, at its place


def _lockstep_batches(node, clients: int, each: int, base: int) -> float:
    """`clients` threads each proposing `each` commands, one at a time, through `node`: the
    proposals per batch the leader made (every command applied once, in one order)."""
    results, errors = [], []

    def client(c):
        try:
            for k in range(each):
                results.append(node.propose(b"c%d-%d" % (c, k), timeout=10.0))
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    b0, p0 = node.proposal_batches, node.proposed          # live counters, unlike status()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(v for _i, v in results) == list(range(base + 1, base + 1 + clients * each))
    return (node.proposed - p0) / (node.proposal_batches - b0)


# 0.25 s, not the default 2 ms: the test is about grouping, not about how fast a loaded machine
# schedules the clients back. (CI's 3.9-4.0 a batch at 0.05 and 0.25 s fit two alternating halves
# that never merged, which RaftNode._linger now prevents.)
@pytest.mark.parametrize("linger", [0.0, 0.25])
def test_lockstep_clients_are_proposed_in_one_batch_and_a_lone_client_is_never_held(tmp_path, linger):
    """Group commit of proposals (RaftNode._linger): clients that each wait for their proposal move in
    one batch rather than several interleaved ones; a lone client's proposals never wait. With
    proposal_linger 0 (never held) the same clients make batches of ~2-3 of the 8."""
    g = Group(tmp_path, proposal_linger=linger).run()
    try:
        node = g.nodes[g.leader()]
        b0, l0 = node.proposal_batches, node.lingered
        for k in range(100):                            # one client, one proposal at a time
            assert node.propose(b"solo-%d" % k)[1] == k + 1
        assert node.proposal_batches - b0 == 100
        assert node.lingered == l0                      # nothing pending, a peak of one: never held
        per_batch = _lockstep_batches(node, clients=8, each=60, base=100)
        if linger:
            assert per_batch > 5, per_batch
        g.converge(580)
        assert len({tuple(sm.items) for sm in g.sms.values()}) == 1
    finally:
        g.close()


def test_read_index_sees_every_acknowledged_write(group):
    for k in range(10):
        last, _ = group.propose(b"w%d" % k)
    follower = next(i for i in group.nodes if not group.nodes[i].is_leader())
    idx = group.nodes[follower].read_index(timeout=5)
    assert idx >= last and group.sms[follower].items[-1] == b"w9"


def test_leader_loss_restart_from_disk_and_snapshot_catch_up(tmp_path):
    g = Group(tmp_path, snapshot_entries=30, compact_keep=5).run()
    try:
        for k in range(20):
            g.propose(b"a%d" % k)
        old = g.leader()
        g.kill(old)
        for k in range(60):  # the survivors snapshot and compact past what `old` has
            g.propose(b"b%d" % k)
        assert g.leader() != old
        g.start(old)
        g.wire()
        g.nodes[old].start()
        g.propose(b"tail")
        g.converge(81)
        assert g.sms[old].items == g.sms[g.leader()].items
        assert g.nodes[old].storage.snapshot().meta.index > 20  # it came back through a snapshot
    finally:
        g.close()


def test_learner_added_promoted_and_old_member_removed_under_load(tmp_path):
    g = Group(tmp_path).run()
    stop = threading.Event()
    acked = []

    def load():
        k = 0
        while not stop.is_set():
            try:
                acked.append(g.propose(b"l%d" % k, timeout=5)[0])
                k += 1
            except (NotLeader, ProposalDropped, RaftTimeout):
                pass

    t = threading.Thread(target=load)
    t.start()
    try:
        _membership_changes(g, stop, t, acked)
    finally:
        stop.set()
        t.join()
        g.close()


def _change(g, cc, timeout=20.0):
    """Propose a membership change on the current leader, retrying while leadership moves (a new
    leader refuses changes until it committed an entry of its term). A refusal as already done
    after an attempt that timed out means that attempt committed (None)."""
    return _change_on(g, cc, timeout)[1]


def _change_on(g, cc, timeout=20.0):
    """_change, and the node that acknowledged it: (node, result)."""
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        node = g.nodes[g.leader()]
        try:
            return node, node.change_membership(cc, timeout=5)
        except MembershipRefused:
            if timed_out:
                return node, None
            raise
        except RaftTimeout:
            timed_out = True
            if time.monotonic() > deadline:
                raise
        except (NotLeader, ProposalDropped):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _membership_changes(g, stop, t, acked):
    try:
        time.sleep(0.3)
        g.start(4)
        for j in (1, 2, 3):  # the new member is told where the group is; the group learns of it by the change
            g.nodes[4].addresses[j] = g.addr(j)
            g.nodes[4].transport.set_peer(j, g.addr(j))
        g.nodes[4].start()
        _change(g, ConfChange(ADD_LEARNER, 4, g.addr(4).encode()))
        lead = g.leader()
        deadline = time.monotonic() + 10
        while g.nodes[4].applied < g.nodes[lead].status()["commit"] - 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        _change(g, ConfChange(ADD_VOTER, 4))
        victim = next(i for i in (1, 2, 3) if i != g.leader())
        _change(g, ConfChange(REMOVE, victim))
        g.kill(victim)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    n = len(g.sms[g.leader()].items)
    g.converge(n)
    live = [g.sms[i].items[:n] for i in g.nodes]
    assert all(x == live[0] for x in live)
    assert g.nodes[g.leader()].conf().voters == {1, 2, 3, 4} - {victim}
    assert len(acked) > 10


def test_transfer_leadership(group):
    lead = group.leader()
    target = next(i for i in group.nodes if i != lead)
    group.nodes[lead].transfer_leader(target)
    deadline = time.monotonic() + 5
    while not group.nodes[target].is_leader() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert group.leader() == target
    with pytest.raises(NotLeader):
        group.nodes[lead].propose(b"x", timeout=2)


def test_status_never_shows_less_than_an_acknowledged_write(group):
    """A replica's status (role, commit, applied, last index) is what `logtide logservice status` and
    the kill tests read to know how far the log goes. An acknowledged proposal is applied, so the
    status read right after its ack must show commit, applied and last index at least at its index,
    also from propose_many. (The streamed transport's node published its status at most every 5 ms
    and after the acks, so a status read just after an ack named an older commit 10-15% of the time:
    the kill tests then cut their final log below an acknowledged append and reported it missing.)"""
    behind, wrong = [], []

    def acked(call):
        # an election under load (this group's 0.2-0.4 s timeouts) moves the leader: ask the new one,
        # and read the status of the node that acknowledged
        deadline = time.monotonic() + 20.0
        while True:
            node = group.nodes[group.leader()]
            try:
                return node, call(node)
            except (NotLeader, ProposalDropped, RaftTimeout):
                if time.monotonic() > deadline:
                    raise

    for k in range(150):
        node, (idx, _) = acked(lambda n: n.propose(b"s%d" % k, timeout=5.0))
        st = node.status()
        if min(st["commit"], st["applied"], st["last_index"]) < idx:
            behind.append((idx, st["commit"], st["applied"], st["last_index"]))
    for k in range(30):
        cmds = [b"m%d-%d" % (k, j) for j in range(4)]
        node, res = acked(lambda n: n.propose_many(cmds, timeout=5.0))
        idxs = [r[0] for r in res]
        if idxs != list(range(idxs[0], idxs[0] + 4)) or idxs[0] == 0 or [node.sm.items[r[1] - 1] for r in res] != cmds:
            wrong.append(idxs)
        st = node.status()
        if min(st["commit"], st["applied"], st["last_index"]) < idxs[-1]:
            behind.append((idxs[-1], st["commit"], st["applied"], st["last_index"]))
    assert not wrong, f"propose_many named indexes {wrong[:5]} for 4 consecutive entries"
    assert not behind, f"{len(behind)} of 180 statuses read after an ack were behind it (index, commit, applied, last): {behind[:5]}"


def test_status_shows_an_acknowledged_membership_change(group):
    """The status of the node that acknowledged a membership change shows the new membership and its
    index. (The node published its status up to 5 ms after the acks, so a learner just removed was
    still listed about one time in ten in the real-process kill tests.)"""
    stale = []
    for k in range(15):
        for cc, present in ((ConfChange(ADD_LEARNER, 4, b"127.0.0.1:1"), True), (ConfChange(REMOVE, 4), False)):
            node, idx = _change_on(group, cc)
            if idx is None:
                continue
            st = node.status()
            if (4 in st["learners"]) != present or st["conf_index"] != idx:
                stale.append((k, present, idx, st["learners"], st["conf_index"]))
    assert not stale, f"{len(stale)} of 30 statuses read after a membership ack were stale: {stale[:5]}"


@pytest.mark.parametrize("tick", [0, -1, 1e-9, 0.0009, float("nan"), float("inf"), 10**400, True, "0.1", None])
def test_a_tick_that_would_spin_or_never_fire_is_refused(tmp_path, tick):
    """A tick under a millisecond only spins the driver (a peer's round trip is longer); NaN or
    infinity would never tick. Each is refused before the node takes its storage."""
    from logtide.errors import InvalidArgument
    st = DiskStorage.open(tmp_path / "n1", voters=[1])
    with pytest.raises(InvalidArgument, match="tick_interval"):
        RaftNode(1, st, ListMachine(), tick_interval=tick)
    sm = ListMachine()
    node = RaftNode(1, st, sm, tick_interval=0.001, election_tick=10, seed=1).start()   # the floor works
    try:
        deadline = time.monotonic() + 10
        while not node.is_leader() and time.monotonic() < deadline:
            time.sleep(0.01)
        node.propose(b"x")
        assert sm.items == [b"x"]
    finally:
        node.stop()


@pytest.mark.parametrize("linger", [-0.001, float("nan"), float("inf"), True, "0.002", None])
def test_a_proposal_linger_that_is_not_a_duration_is_refused(tmp_path, linger):
    from logtide.errors import InvalidArgument
    st = DiskStorage.open(tmp_path / "n1", voters=[1])
    try:
        with pytest.raises(InvalidArgument, match="proposal_linger"):
            RaftNode(1, st, ListMachine(), proposal_linger=linger)
    finally:
        st.close()
