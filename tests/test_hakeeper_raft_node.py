"""HAKeeper's state machine in three real RaftNodes in one process (DiskStorage files, Raft peers on
127.0.0.1): a world of stores bootstraps through it, loses a log store and is repaired; the
HAKeeper leader is stopped mid-run and another replica takes over with ticks going on and no
queued command lost; the stopped replica restarts from its files (snapshot + log) and ends in
the same state, byte for byte; bootstrap is not repeated; bad input gets typed errors."""
import io
import time

import pytest

from hakeeper_world import World
from logtide.engine.hakeeper import (ClusterInfo, CommandType, HAKeeperStateMachine, InitialCluster,
                                     LogStoreHeartbeat, StoreRole, Tick, encode_command, leader_batch)
from logtide.engine.hakeeper.cluster_info import BootstrapState
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.errors import NotLeader, ProposalDropped, RaftTimeout
from logtide.engine.nodehost.node import RaftNode
from logtide.engine.nodehost.transport import RAFT_SERVICE
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import MalformedCommandError, UnknownStoreError

C = CommandType


class HAKeeperGroup:
    """Three HAKeeper replicas, each a RaftNode over DiskStorage with an RPC server for its peers."""

    def __init__(self, tmp_path, **kw):
        self.tmp, self.kw = tmp_path, kw
        self.ids = (1, 2, 3)
        self.nodes, self.sms, self.servers, self.ports = {}, {}, {}, {}
        for i in self.ids:
            self.start(i)
        self.wire()
        for n in self.nodes.values():
            n.start()

    def start(self, i):
        sm = HAKeeperStateMachine()
        st = DiskStorage.open(self.tmp / f"hakeeper-{i}", voters=list(self.ids))
        server = WireServer(f"127.0.0.1:{self.ports.get(i, 0)}")
        node = RaftNode(i, st, sm, tick_interval=0.02, election_tick=10, seed=i, **self.kw)
        server.add_service(RAFT_SERVICE, node.transport.servicer)
        self.ports[i] = server.start()
        self.nodes[i], self.sms[i], self.servers[i] = node, sm, server
        return node

    def wire(self):
        for i, n in self.nodes.items():
            for j in self.nodes:
                if j != i:
                    n.addresses[j] = f"127.0.0.1:{self.ports[j]}"
                    n.transport.set_peer(j, f"127.0.0.1:{self.ports[j]}")

    def stop(self, i):
        self.nodes[i].stop()
        self.servers[i].stop(0)
        self.nodes[i].storage.close()
        del self.nodes[i]

    def restart(self, i):
        node = self.start(i)
        self.wire()
        node.start()

    def leader(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ls = [i for i, n in self.nodes.items() if n.is_leader()]
            if len(ls) == 1:
                return ls[0]
            time.sleep(0.01)
        raise AssertionError("no single leader")

    def propose(self, data: bytes, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            node = self.nodes[self.leader(max(0.1, deadline - time.monotonic()))]
            try:
                return node.propose(data, timeout=2.0)[1]
            except (NotLeader, ProposalDropped, RaftTimeout):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def leader_state(self):
        """(term, state) read on the confirmed leader after a ReadIndex: what its checkers see."""
        while True:
            i = self.leader()
            try:
                index, term = self.nodes[i].leader_read_index(timeout=2.0)
                return term, self.sms[i].lookup("state")
            except (NotLeader, RaftTimeout):
                time.sleep(0.02)

    def converge(self, min_index=0, timeout=10.0):
        """Every running replica applied the same index (at least min_index); returns their snapshot bytes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            applied = {i: n.status()["applied"] for i, n in self.nodes.items()}
            indexes = {self.sms[i].state.index for i in self.nodes}
            if len(set(applied.values())) == 1 and len(indexes) == 1 and min(indexes) >= min_index:
                return {i: self.sms[i].snapshot_bytes() for i in self.nodes}
            time.sleep(0.02)
        raise AssertionError(f"replicas did not converge: {applied}")

    def close(self):
        for i in list(self.nodes):
            self.stop(i)


class RaftWorld(World):
    """The test world, with every HAKeeper command proposed through the Raft group."""

    def __init__(self, group: HAKeeperGroup, **kw):
        self.group = group
        super().__init__(**kw)

    def propose(self, cmd):
        return self.group.propose(encode_command(cmd))

    @property
    def state(self):
        return self.group.leader_state()[1]

    def check(self):
        term, state = self.group.leader_state()
        batch = leader_batch(state, self.cfg, term)
        if batch is not None:
            taken = self.propose(batch)
            if taken >= 0:
                self.issued.extend(batch.commands)


@pytest.fixture
def group(tmp_path):
    g = HAKeeperGroup(tmp_path, snapshot_entries=60, compact_keep=10)
    yield g
    g.close()


def test_hakeeper_in_three_raft_nodes_repairs_fails_over_and_restarts_identically(group):
    w = RaftWorld(group, log_stores=4, tn_stores=1)
    for _ in range(120):
        w.step()
        if w.state.bootstrap == BootstrapState.RUNNING and len(w.healthy_voters()) == 3 and w.tn_runners():
            break
    assert w.state.bootstrap == BootstrapState.RUNNING and len(w.healthy_voters()) == 3
    # a log store dies: HAKeeper (over Raft) adds a learner, promotes it and removes the dead replica
    sh = w.shards[1]
    victim = next(r for r, s in sh.voters.items() if r != sh.leader)
    w.set_up(sh.voters[victim], False)
    for _ in range(w.cfg.timeout_ticks(StoreRole.LOG) + 15):
        w.step()
    # ... while the HAKeeper leader is stopped in the middle of it
    old = group.leader()
    before = group.sms[old].snapshot_bytes()
    tick_before, index_before = group.sms[old].state.tick, group.sms[old].state.index
    group.stop(old)
    new = group.leader()
    assert new != old
    # the survivors hold exactly what the old leader had applied: no tick, heartbeat or queued
    # schedule command was lost with it
    assert set(group.converge(index_before).values()) == {before}
    for _ in range(150):
        w.step()
        if len(w.healthy_voters()) == 3 and victim not in w.shards[1].voters:
            break
    assert len(w.healthy_voters()) == 3 and victim not in w.shards[1].voters
    steps = [(t, c.kind, c.learner) for t, _s, c in w.executed if c.kind in (C.ADD_REPLICA, C.REMOVE_REPLICA)]
    assert [k for _t, k, _l in steps] == [C.ADD_REPLICA, C.ADD_REPLICA, C.REMOVE_REPLICA]
    assert [learner for _t, k, learner in steps[:2]] == [True, False]   # learner, then voter, then removal
    assert group.sms[new].state.tick > tick_before + 10   # ticks went on under the new leader
    executed = [c for _t, _s, c in w.executed]
    assert len({(c.kind, c.shard_id, c.replica_id, c.learner) for c in executed}) == len(executed), \
        "a schedule command ran twice"
    # the old leader restarts from its files and ends in the same state as the others
    group.restart(old)
    w.run(20)
    snaps = group.converge()
    assert len(set(snaps.values())) == 1
    assert group.nodes[old].storage.snapshot().meta.index > 0   # snapshots were taken and compacted
    # a restarted store process proposing its bootstrap again changes nothing
    assert group.propose(encode_command(InitialCluster(ClusterInfo(log_shards=2)))) is False
    assert group.leader_state()[1].cluster == ClusterInfo(1, 3, 0, 1)


def test_bad_input_through_raft_gets_typed_errors_and_the_group_keeps_going(group):
    group.propose(encode_command(Tick()))
    with pytest.raises(MalformedCommandError):
        group.nodes[group.leader()].propose(b"HK\x01\x63", timeout=5)
    with pytest.raises(UnknownStoreError):
        group.nodes[group.leader()].propose(encode_command(LogStoreHeartbeat("log-9")), timeout=5)
    assert group.propose(encode_command(Tick())) == 2
    snaps = group.converge()
    assert len(set(snaps.values())) == 1
    sm = HAKeeperStateMachine()
    sm.recover_from_snapshot(io.BytesIO(next(iter(snaps.values()))))
    assert sm.lookup("tick") == 2 and sm.state.stores == {}
