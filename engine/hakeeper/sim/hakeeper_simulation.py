"""HAKeeperSimulation: the Raft simulator (engine/raft/sim) running HAKeeper's group.

The replicas run HAKeeper's state machine; the clients' proposals are HAKeeper's own traffic,
drawn from the seed: ticks, store registrations and heartbeats (log stores reporting a shard whose
membership, term and leader move; TN, CN, primary and RO nodes), the bootstrap command proposed
again and again (it must take once), malformed bytes and heartbeats from unknown stores (refused
the same way everywhere), and schedule command batches that the proposing replica's checkers
compute from its own state, stamped with its Raft term, and an operator's schedule commands
(some for replicas or stores that do not exist). The simulator's checker holds every
replica to the same HAKeeper state at each applied index, through crashes, partitions, snapshots
and membership changes.
"""
from __future__ import annotations

from logtide.engine.hakeeper.checkers import leader_batch
from logtide.engine.hakeeper.cluster_info import ClusterInfo
from logtide.engine.hakeeper.command import InitialCluster, OperatorSchedule, RegisterStore, Tick, encode_command
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.heartbeat import (CNHeartbeat, LogReplicaInfo, LogStoreHeartbeat, PrimaryHeartbeat,
                                               RoHeartbeat, TNHeartbeat)
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.sim.sim_state_machine import HAKeeperSimStateMachine
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.engine.raft.sim.cluster import SimResult, Simulation

LOG_STORES = ("log-1", "log-2", "log-3", "log-4")
OTHERS = (("tn-1", StoreRole.TN), ("tn-2", StoreRole.TN), ("cn-1", StoreRole.CN), ("primary", StoreRole.PRIMARY),
          ("ro-1", StoreRole.RO), ("ro-2", StoreRole.RO))
# short timeouts, so that stores the workload stops beating for expire within a run
SIM_CONFIG = HAKeeperConfig(log_store_timeout=1.0, tn_store_timeout=0.5, cn_store_timeout=0.5, ro_timeout=0.5,
                            primary_timeout=0.5, command_timeout=0.5)


class HAKeeperSimulation(Simulation):
    REPLAY_MODULE = "logtide.engine.hakeeper.sim"
    ENTRY_SCALE = 32   # HAKeeper commands are ~20-300 bytes where the plain workload's are ~6

    def __init__(self, seed: int, **kw) -> None:
        super().__init__(seed, **kw)
        self.batches = 0              # schedule command batches proposed
        self.lsn = 0                  # the simulated log shard's LSN
        self.shard_epoch, self.shard_term = 1, 1

    def restore_state_machine(self, data: bytes, index: int):
        return HAKeeperSimStateMachine.restore(data, index)

    def proposal_number(self, data: bytes) -> int:
        return int(data[1:data.index(b";")])

    def proposal(self, key: bytes) -> bytes:
        return key + b";" + self._command()

    def _command(self) -> bytes:
        """One HAKeeper command, drawn from the seed (and from the leader's own state)."""
        rng = self.rng
        lead = self.leader()
        state = lead.sm.hk.lookup("state") if lead is not None else None
        if state is not None:
            missing = [s for s in LOG_STORES if s not in state.stores]
            missing += [s for s, _r in OTHERS if s not in state.stores]
            if missing and rng.random() < 0.4:
                sid = rng.choice(missing)
                role = StoreRole.LOG if sid.startswith("log") else dict(OTHERS)[sid]
                return encode_command(RegisterStore(role, sid, f"addr-{sid}"))
            if state.bootstrap.name == "CREATED" and rng.random() < 0.3:
                return self._initial_cluster()
        roll = rng.random()
        if roll < 0.40:
            return encode_command(Tick())
        if roll < 0.43:
            return self._initial_cluster()   # again: it must take only once
        if roll < 0.47:
            return rng.choice((b"", b"HK", b"HK\x01\x63", b"XX\x01\x01", b"HK\x01\x03\x00\x09log-", b"HK\x02\x01",
                               encode_command(CNHeartbeat("cn-unknown", 1))))
        if roll < 0.50:
            return self._operator_schedule()
        if roll < 0.65:
            batch = self._leader_batch()
            if batch is not None:
                return batch
        return self._heartbeat()

    def _initial_cluster(self) -> bytes:
        rng = self.rng
        return encode_command(InitialCluster(ClusterInfo(1, rng.choice((1, 3, 3)), rng.choice((0, 1)), 1)))

    def _operator_schedule(self) -> bytes:
        rng = self.rng
        n = rng.randint(1, 4)
        kind = rng.choice((CommandType.STOP_REPLICA, CommandType.STOP_NON_VOTING_REPLICA, CommandType.KILL_ZOMBIE,
                           CommandType.STOP_TN))
        if kind == CommandType.STOP_TN:
            c = ScheduleCommand(kind, rng.choice(("tn-1", "tn-2", "tn-9")), 1, 1, "")
        else:   # replica n on log-n (maybe running, maybe not), or one that never exists
            c = ScheduleCommand(kind, f"log-{n}", 1, rng.choice((n, 99)), f"log-{n}")
        return encode_command(OperatorSchedule(rng.randint(1, 10), (c,)))

    def _leader_batch(self) -> bytes | None:
        lead = self.leader()
        if lead is None:
            return None
        state = lead.sm.hk.lookup("state")
        batch = leader_batch(state, SIM_CONFIG, lead.raw.raft.term)
        if batch is None:
            return None
        self.batches += 1
        return encode_command(batch)

    def _heartbeat(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.6:
            # some stores stay silent for a while: the checkers see them go down and come back
            sid = rng.choice(LOG_STORES[:3] if rng.random() < 0.7 else LOG_STORES)
            self.lsn += rng.randint(0, 5)
            if rng.random() < 0.05:
                self.shard_epoch += 1
            if rng.random() < 0.05:
                self.shard_term += 1
            n = int(sid[-1])
            voters = tuple((i, f"log-{i}") for i in (1, 2, 3))
            if n == 4 and rng.random() < 0.5:
                rep = LogReplicaInfo(1, 7, 1, 0, rng.randint(0, self.shard_epoch), 0)   # a zombie, maybe
            else:
                rep = LogReplicaInfo(1, n if n < 4 else 4, self.shard_term, rng.choice((0, 1, 2, 3)),
                                     self.shard_epoch, self.lsn, voters)
            reps = (rep,) if rng.random() < 0.9 else ()
            return encode_command(LogStoreHeartbeat(sid, reps))
        sid, role = rng.choice(OTHERS)
        if role == StoreRole.TN:
            hb = TNHeartbeat(sid, ((1, rng.randint(1, 30)),) if rng.random() < 0.6 else (), self.lsn)
        elif role == StoreRole.CN:
            hb = CNHeartbeat(sid, self.lsn)
        elif role == StoreRole.PRIMARY:
            hb = PrimaryHeartbeat(sid, self.lsn + 10, self.lsn, rng.randint(0, self.lsn))
        else:
            hb = RoHeartbeat(sid, self.lsn, self.lsn, rng.randint(0, self.lsn + 1))
        return encode_command(hb)


class HAKeeperSimResult(SimResult):
    def __init__(self, sim: HAKeeperSimulation, error: str | None) -> None:
        super().__init__(sim, error)
        lead = sim.leader()
        st = lead.sm.hk.lookup("state") if lead is not None else None
        self.batches = sim.batches
        self.tick = st.tick if st else -1
        self.bootstrap = st.bootstrap.name if st else "?"
        self.refused = lead.sm.refused if lead is not None else -1
        self.term = st.term if st else -1

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + (f", hakeeper(tick={self.tick}, bootstrap={self.bootstrap}, "
                                          f"batches={self.batches}, refused={self.refused}, batch_term={self.term}))")


def run_hakeeper_seed(seed: int, **kw) -> HAKeeperSimResult:
    sim = HAKeeperSimulation(seed, **kw)
    res = sim.run()
    return HAKeeperSimResult(sim, res.error)

