"""A small world of stores for HAKeeper's tests: log stores that run log shard replicas and carry
out schedule commands, TN stores, CNs and RO nodes, driven against a real HAKeeperStateMachine.

The world is the other side of HAKeeper: it owns each log shard's real membership (the Raft
group's, changed only by the commands HAKeeper sends), elects a new shard leader when the leader's
store goes down and a majority of voters is up, and has each up store heartbeat every
`beat_every` ticks with what it really runs. Stores go down and come back when a test says so; a
store that comes back restarts the replicas it ran. HAKeeper learns all of it only through
heartbeats. Every command goes through the state machine as bytes, the way Raft would carry it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logtide.engine.hakeeper import (CNHeartbeat, ClusterInfo, CommandType, HAKeeperConfig, HAKeeperStateMachine,
                                     InitialCluster, LogReplicaInfo, LogStoreHeartbeat, RegisterStore, RoHeartbeat,
                                     StoreRole, TNHeartbeat, Tick, encode_command, leader_batch)
from logtide.engine.statemachine import Entry

C = CommandType


@dataclass
class Shard:
    shard_id: int
    voters: dict[int, str] = field(default_factory=dict)
    learners: dict[int, str] = field(default_factory=dict)
    epoch: int = 0
    term: int = 0
    leader: int = 0
    lsn: int = 0


@dataclass
class Replica:
    replica_id: int
    epoch: int            # the membership epoch this replica has seen
    lsn: int = 0


class World:
    def __init__(self, log_stores: int = 4, tn_stores: int = 1, cns: int = 0, ros: int = 0,
                 cluster: ClusterInfo = ClusterInfo(log_shards=1, log_replicas=3), config: HAKeeperConfig | None = None,
                 beat_every: int = 10, check_every: int = 5) -> None:
        self.cfg = config or HAKeeperConfig(log_store_timeout=3.0, tn_store_timeout=2.0, cn_store_timeout=2.0,
                                            ro_timeout=2.0, command_timeout=3.0)
        self.sm = HAKeeperStateMachine()
        self.index = 0
        self.term = 1
        self.beat_every, self.check_every = beat_every, check_every
        self.now = 0                                      # world ticks (HAKeeper's tick follows)
        self.roles: dict[str, StoreRole] = {}
        self.up: dict[str, bool] = {}
        self.running: dict[str, dict[int, Replica]] = {}  # log store -> shard -> replica it runs
        self.tn_running: dict[str, dict[int, int]] = {}   # TN store -> TN shard -> replica
        self.shards: dict[int, Shard] = {}
        self.executed: list = []                          # every command a store carried out, in order
        self.issued: list = []                            # every command HAKeeper accepted, in order
        for i in range(1, log_stores + 1):
            self._add(f"log-{i}", StoreRole.LOG)
        for i in range(1, tn_stores + 1):
            self._add(f"tn-{i}", StoreRole.TN)
        for i in range(1, cns + 1):
            self._add(f"cn-{i}", StoreRole.CN)
        for i in range(1, ros + 1):
            self._add(f"ro-{i}", StoreRole.RO)
        assert self.propose(InitialCluster(cluster)) is True
        for shard_id in cluster.log_shard_ids():
            self.shards[shard_id] = Shard(shard_id)

    # --- HAKeeper's side ---------------------------------------------------------------------------

    def propose(self, cmd):
        """Apply one command as a committed Raft entry would be applied."""
        self.index += 1
        return self.sm.update(Entry(self.index, encode_command(cmd)))

    def _add(self, sid: str, role: StoreRole) -> None:
        self.roles[sid] = role
        self.up[sid] = True
        if role == StoreRole.LOG:
            self.running[sid] = {}
        elif role == StoreRole.TN:
            self.tn_running[sid] = {}
        self.propose(RegisterStore(role, sid, f"addr-{sid}"))

    @property
    def state(self):
        return self.sm.state

    def check(self) -> None:
        batch = leader_batch(self.sm.lookup("state"), self.cfg, self.term)
        if batch is not None:
            taken = self.propose(batch)
            assert taken >= 0, "the leader's own fresh batch was refused as stale"
            self.issued.extend(batch.commands)

    # --- the stores' side --------------------------------------------------------------------------

    def set_up(self, sid: str, up: bool) -> None:
        if self.up[sid] == up:
            return
        self.up[sid] = up
        if self.roles[sid] == StoreRole.TN and not up:
            self.tn_running[sid] = {}   # a TN's shard dies with its process; HAKeeper restarts it
        if self.roles[sid] == StoreRole.RO and up and sid not in self.state.stores:
            self.propose(RegisterStore(StoreRole.RO, sid, f"addr-{sid}"))   # dropped while away: rejoin
        if self.roles[sid] == StoreRole.CN and up and sid not in self.state.stores:
            self.propose(RegisterStore(StoreRole.CN, sid, f"addr-{sid}"))
        self._elect()

    def _elect(self) -> None:
        """A shard whose leader's store is down elects a live voter when a majority is up."""
        for sh in self.shards.values():
            leader_store = sh.voters.get(sh.leader)
            if leader_store is not None and self.up[leader_store]:
                continue
            live = sorted(r for r, s in sh.voters.items() if self.up[s] and self.running[s].get(sh.shard_id)
                          and self.running[s][sh.shard_id].replica_id == r)
            if sh.voters and 2 * len(live) > len(sh.voters):
                sh.term += 1
                sh.leader = live[0]
            else:
                sh.leader = 0

    def _catch_up(self) -> None:
        """Running members on up stores see the current membership and log."""
        for sh in self.shards.values():
            if sh.leader:
                sh.lsn += 1
            members = {**sh.voters, **sh.learners}
            for rid, sid in members.items():
                rep = self.running[sid].get(sh.shard_id) if self.up[sid] else None
                if rep is not None and rep.replica_id == rid and sh.leader:
                    rep.epoch, rep.lsn = sh.epoch, sh.lsn

    def heartbeat(self, sid: str):
        role = self.roles[sid]
        if role == StoreRole.LOG:
            reps = []
            for shard_id, rep in sorted(self.running[sid].items()):
                sh = self.shards[shard_id]
                current = rep.epoch == sh.epoch
                reps.append(LogReplicaInfo(
                    shard_id, rep.replica_id, sh.term if current else 0, sh.leader if current else 0, rep.epoch,
                    rep.lsn, tuple(sorted(sh.voters.items())) if current else (),
                    tuple(sorted(sh.learners.items())) if current else ()))
            hb = LogStoreHeartbeat(sid, tuple(reps))
        elif role == StoreRole.TN:
            hb = TNHeartbeat(sid, tuple(sorted(self.tn_running[sid].items())), 0)
        elif role == StoreRole.CN:
            hb = CNHeartbeat(sid, self.now)
        else:
            hb = RoHeartbeat(sid, 0, self.now, self.now)
        for c in self.propose(hb):
            self.execute(sid, c)

    def execute(self, sid: str, c) -> None:
        """What a store does with a command from its heartbeat reply."""
        self.executed.append((self.now, sid, c))
        k = c.kind
        if k == C.START_TN and self.roles[sid] == StoreRole.LOG:
            # a log store restarts the TN store that died (a local cluster's log stores can)
            self.set_up(c.replica_store, True)
            self.tn_running[c.replica_store][c.shard_id] = c.replica_id
            return
        if k in (C.START_TN, C.STOP_TN):
            if k == C.START_TN:
                self.tn_running[sid][c.shard_id] = c.replica_id
            else:
                self.tn_running[sid].pop(c.shard_id, None)
            return
        sh = self.shards[c.shard_id]
        if k in (C.ADD_REPLICA, C.ADD_NON_VOTING_REPLICA, C.REMOVE_REPLICA, C.REMOVE_NON_VOTING_REPLICA):
            leader_store = sh.voters.get(sh.leader)
            if leader_store != sid:
                return   # only the leader changes membership; HAKeeper retries after the timeout
            if k == C.ADD_REPLICA and not c.learner:
                if c.replica_id in sh.learners:
                    sh.voters[c.replica_id] = sh.learners.pop(c.replica_id)
                    sh.epoch += 1
            elif k in (C.ADD_REPLICA, C.ADD_NON_VOTING_REPLICA):
                assert c.replica_id not in sh.voters and c.replica_id not in sh.learners, "replica id reused"
                sh.learners[c.replica_id] = c.replica_store
                sh.epoch += 1
            elif c.replica_id in sh.voters or c.replica_id in sh.learners:
                assert len(sh.voters) > 1 or c.replica_id not in sh.voters, "removed the last voter"
                sh.voters.pop(c.replica_id, None)
                sh.learners.pop(c.replica_id, None)
                sh.epoch += 1
                if c.replica_id == sh.leader:
                    self._elect()
        elif k in (C.START_REPLICA, C.START_NON_VOTING_REPLICA):
            if c.members and not sh.voters and sh.epoch == 0:
                sh.voters = dict(c.members)
                sh.epoch = 1
            if c.shard_id not in self.running[sid]:
                self.running[sid][c.shard_id] = Replica(c.replica_id, 0)
            if not sh.leader:
                self._elect()
        elif k in (C.STOP_REPLICA, C.STOP_NON_VOTING_REPLICA, C.KILL_ZOMBIE):
            rep = self.running[sid].get(c.shard_id)
            if rep is not None and rep.replica_id == c.replica_id:
                del self.running[sid][c.shard_id]

    def step(self) -> None:
        """One tick of the world: HAKeeper ticks, shards replicate, stores beat, the leader checks."""
        self.now += 1
        self.propose(Tick())
        self._elect()
        self._catch_up()
        for n, sid in enumerate(sorted(self.roles)):
            if self.up[sid] and (self.now + n) % self.beat_every == 0:
                self.heartbeat(sid)
        if self.now % self.check_every == 0:
            self.check()

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    # --- what a healthy world looks like ------------------------------------------------------------

    def healthy_voters(self, shard_id: int = 1) -> list[int]:
        sh = self.shards[shard_id]
        return sorted(r for r, s in sh.voters.items() if self.up[s] and self.running[s].get(shard_id)
                      and self.running[s][shard_id].replica_id == r)

    def zombies(self) -> list[tuple[str, int, int]]:
        out = []
        for sid, reps in self.running.items():
            for shard_id, rep in reps.items():
                sh = self.shards[shard_id]
                if self.up[sid] and {**sh.voters, **sh.learners}.get(rep.replica_id) != sid:
                    out.append((sid, shard_id, rep.replica_id))
        return out

    def tn_runners(self, shard_id: int = 1) -> list[str]:
        return sorted(s for s, shards in self.tn_running.items() if self.up[s] and shard_id in shards)
