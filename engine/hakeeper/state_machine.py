"""HAKeeperStateMachine: HAKeeper's replicated state machine, in the seed's RSM shape
(update / lookup / save_snapshot / recover_from_snapshot / close).

`update` is deterministic: the same state and entry give the same state and result on every
replica. A refused command (malformed bytes, an unknown store or replica) raises a typed error and
changes nothing but the applied index, the same on every replica. Results:

- Tick: the new tick;
- RegisterStore: the store's tick;
- a heartbeat: the store's queued schedule commands (a tuple), which are deleted from the queue;
- ScheduleCommandBatch: the number of commands taken, or -1 when the batch is stale and ignored;
- OperatorSchedule: the number of commands taken (one already in flight is not taken again);
- InitialCluster: True when it bootstrapped, False when the cluster was already bootstrapped.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, BinaryIO

from logtide.engine.hakeeper.cluster_info import BootstrapState
from logtide.engine.hakeeper.command_progress import finished
from logtide.engine.hakeeper.command import (Command, InitialCluster, OperatorSchedule, RegisterStore,
                                             ScheduleCommandBatch, Tick, decode_command)
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.heartbeat import LogStoreHeartbeat, PrimaryHeartbeat
from logtide.engine.hakeeper.log_shard_state import LogShardState
from logtide.engine.hakeeper.schedule_command import SELF_APPLIED, CommandType, ScheduleCommand
from logtide.engine.hakeeper.state_snapshot import decode_state, encode_state
from logtide.engine.hakeeper.store_role import ROLE_NAMES, StoreRole
from logtide.engine.hakeeper.store_state import StoreState
from logtide.engine.statemachine import Entry, StateMachine
from logtide.errors import HAKeeperError, UnknownReplicaError, UnknownStoreError

STALE_BATCH = -1


class HAKeeperStateMachine(StateMachine):
    def __init__(self) -> None:
        self.lock = threading.RLock()   # the apply thread and readers (lookup, snapshots)
        self.state = HAKeeperState()
        self._closed = False

    # --- the RSM interface ---------------------------------------------------------------------

    def update(self, entry: Entry) -> Any:
        with self.lock:
            if self._closed:
                raise HAKeeperError("the HAKeeper state machine is closed")
            if entry.index <= self.state.index:
                raise HAKeeperError(f"entry {entry.index} is not after the last applied entry {self.state.index}")
            self.state.index = entry.index   # a refused command is applied too: as a no-op
            return self.apply(decode_command(entry.cmd))

    def lookup(self, query: Any) -> Any:
        """"state" (a copy), "tick", "bootstrap", "truncation_lsn", or ("queued", store_id)."""
        with self.lock:
            st = self.state
            if query == "state":
                return st.copy()
            if query == "tick":
                return st.tick
            if query == "bootstrap":
                return st.bootstrap
            if query == "truncation_lsn":
                return st.truncation_lsn
            if isinstance(query, tuple) and len(query) == 2 and query[0] == "queued":
                return tuple(st.queued.get(query[1], ()))
            raise HAKeeperError(f"unknown HAKeeper query {query!r}")

    def save_snapshot(self, out: BinaryIO) -> int:
        with self.lock:
            out.write(encode_state(self.state))
            return self.state.index

    def recover_from_snapshot(self, src: BinaryIO) -> int:
        st = decode_state(src.read())   # checked whole before it replaces anything
        with self.lock:
            self.state = st
            return st.index

    def close(self) -> None:
        with self.lock:
            self._closed = True

    def snapshot_bytes(self) -> bytes:
        with self.lock:
            return encode_state(self.state)

    # --- applying commands -------------------------------------------------------------------------

    def apply(self, cmd: Command) -> Any:
        """update() on a decoded command (the applied index is the caller's)."""
        st = self.state
        if isinstance(cmd, Tick):
            st.tick += 1
            self._expire()
            return st.tick
        if isinstance(cmd, RegisterStore):
            return self._register(cmd)
        if isinstance(cmd, InitialCluster):
            return self._bootstrap(cmd)
        if isinstance(cmd, ScheduleCommandBatch):
            return self._take_batch(cmd)
        if isinstance(cmd, OperatorSchedule):
            return self._take_operator(cmd)
        return self._heartbeat(cmd)

    def _expire(self) -> None:
        """Commands past their tick are no longer in flight; undelivered ones leave their queue
        (the checkers issue them again if they are still needed, maybe to another store)."""
        st = self.state
        gone = [k for k, c in st.in_flight.items() if c.expires_tick < st.tick]
        if not gone:
            return
        dropped = {st.in_flight.pop(k) for k in gone}
        for c in dropped:   # a non-voting replica that was never added is not one
            shard = st.shards.get(c.shard_id)
            if c.kind == CommandType.ADD_NON_VOTING_REPLICA and shard is not None \
                    and c.replica_id not in shard.learners:
                shard.non_voting.discard(c.replica_id)
        self._unqueue(dropped)

    def _unqueue(self, commands: set[ScheduleCommand]) -> None:
        st = self.state
        for sid in list(st.queued):
            left = [c for c in st.queued[sid] if c not in commands]
            if left:
                st.queued[sid] = left
            else:
                del st.queued[sid]

    def _register(self, cmd: RegisterStore) -> int:
        st = self.state
        s = st.stores.get(cmd.store_id)
        if s is None:
            st.stores[cmd.store_id] = StoreState(cmd.role, cmd.store_id, cmd.address, st.tick)
        elif s.role != cmd.role:
            raise UnknownStoreError(f"store {cmd.store_id!r} is registered as {ROLE_NAMES[s.role]}, "
                                    f"not {ROLE_NAMES[cmd.role]}")
        else:
            s.address, s.tick = cmd.address, st.tick
        return st.tick

    def _bootstrap(self, cmd: InitialCluster) -> bool:
        st = self.state
        if st.bootstrap != BootstrapState.CREATED:
            return False   # bootstrap happens once; a restart or a replay proposes it again harmlessly
        st.cluster = cmd.info
        st.bootstrap = BootstrapState.BOOTSTRAPPING
        for shard_id in cmd.info.log_shard_ids():
            st.shards[shard_id] = LogShardState(shard_id)
        self._maybe_running()
        return True

    def _maybe_running(self) -> None:
        """Bootstrapping → Running once every log shard has a majority of its replicas reported
        running (MatrixOne's CheckBootstrap): from then on the log checker starts or replaces the
        rest, so a founder whose store never comes back does not hold the cluster in bootstrap."""
        st = self.state
        if st.bootstrap != BootstrapState.BOOTSTRAPPING or st.cluster is None:
            return
        for shard in st.shards.values():
            running = 0
            for rid, sid in shard.voters.items():
                store = st.stores.get(sid)
                rep = store.log_replicas().get(shard.shard_id) if store else None
                running += rep is not None and rep.replica_id == rid
            if 2 * running <= st.cluster.log_replicas:
                return
        st.bootstrap = BootstrapState.RUNNING

    def _heartbeat(self, hb) -> tuple[ScheduleCommand, ...]:
        st = self.state
        s = st.stores.get(hb.store_id)
        if s is None:
            raise UnknownStoreError(f"heartbeat from unknown store {hb.store_id!r}: register it first")
        if s.role != hb.role:
            raise UnknownStoreError(f"store {hb.store_id!r} is registered as {ROLE_NAMES[s.role]}, but sent a "
                                    f"{ROLE_NAMES[hb.role]} heartbeat")
        s.tick, s.report = st.tick, hb
        if isinstance(hb, LogStoreHeartbeat):
            for rep in hb.replicas:
                shard = st.shards.get(rep.shard_id)
                if shard is not None:   # other shards (HAKeeper's own, shard 0) are not checked here
                    shard.update(rep)
                    # ids the shard already uses (founders that bootstrapped on their own) are never handed out
                    seen = [rep.replica_id, *(r for r, _s in rep.voters), *(r for r, _s in rep.learners)]
                    st.next_replica_id = max(st.next_replica_id, max(seen) + 1)
            self._maybe_running()
        elif isinstance(hb, PrimaryHeartbeat):
            self._advance_truncation(hb.truncate_request)
        batch = tuple(st.queued.pop(hb.store_id, ()))
        for c in batch:   # delivered now: in flight from now on, until its effect shows or it times out
            if st.in_flight.get(c.key()) == c and c.timeout_ticks:
                st.in_flight[c.key()] = replace(c, expires_tick=max(c.expires_tick, st.tick + c.timeout_ticks))
        self._drop_finished()
        return batch

    def _drop_finished(self) -> None:
        st = self.state
        done = {k: c for k, c in st.in_flight.items() if finished(c, st)}
        if not done:
            return
        for k, c in done.items():
            del st.in_flight[k]
            shard = st.shards.get(c.shard_id)
            if c.kind in (CommandType.REMOVE_REPLICA, CommandType.REMOVE_NON_VOTING_REPLICA) and shard is not None:
                shard.non_voting.discard(c.replica_id)   # gone from the membership: ids are never reused
        self._unqueue(set(done.values()))

    def _advance_truncation(self, request: int) -> None:
        st = self.state
        hold = st.truncation_hold()
        target = request if hold is None else min(request, hold)
        if target > st.truncation_lsn:
            st.truncation_lsn = target

    # --- schedule command batches ----------------------------------------------------------------

    def _take_batch(self, b: ScheduleCommandBatch) -> int:
        st = self.state
        if b.term < st.term or b.seen_index < st.last_batch_index:
            return STALE_BATCH   # an old leader's, or computed before the last batch was applied
        for c in b.commands:
            self._check(c)
        st.term, st.last_batch_index = b.term, st.index
        return sum(self._take(c) for c in b.commands)

    def _take_operator(self, o: OperatorSchedule) -> int:
        st = self.state
        for c in o.commands:
            self._check(c)
        stamped = [replace(c, expires_tick=st.tick + o.timeout_ticks, timeout_ticks=o.timeout_ticks)
                   for c in o.commands]
        return sum(self._take(c) for c in stamped)

    def _take(self, c: ScheduleCommand) -> int:
        """Queue one checked command for its target (or apply it, when HAKeeper's own); 1 when taken."""
        st = self.state
        if c.replica_id:
            st.next_replica_id = max(st.next_replica_id, c.replica_id + 1)
        if c.kind in SELF_APPLIED:
            if st.stores[c.target].tick == c.store_tick:   # no heartbeat since the check found it down
                del st.stores[c.target]
                st.queued.pop(c.target, None)
                return 1
            return 0
        key = c.key()
        if key in st.in_flight:
            return 0   # already on its way: never run twice
        if c.kind == CommandType.START_REPLICA and c.members:
            shard = st.shards[c.shard_id]
            if not shard.voters and shard.epoch == 0:
                shard.voters = dict(c.members)
        elif c.kind == CommandType.ADD_NON_VOTING_REPLICA:
            st.shards[c.shard_id].non_voting.add(c.replica_id)
        st.queued.setdefault(c.target, []).append(c)
        st.in_flight[key] = c
        return 1

    def _check(self, c: ScheduleCommand) -> None:
        """Refuse (before anything changes) a command naming a store or replica the state lacks."""
        st = self.state
        target = st.stores.get(c.target)
        want = _TARGET_ROLE[c.kind]
        if c.kind == CommandType.START_TN and target is not None and target.role == StoreRole.LOG:
            # a log store restarts the TN store `replica_store` (tn_checker: no TN store works)
            tn = st.stores.get(c.replica_store)
            if tn is None or tn.role != StoreRole.TN:
                raise UnknownStoreError(f"START_TN: no registered TN store {c.replica_store!r} to restart")
            target = tn
        elif target is None or target.role != want:
            raise UnknownStoreError(f"{c.kind.name}: no registered {ROLE_NAMES[want]} store {c.target!r}")
        k = c.kind
        if want == StoreRole.TN:
            if st.cluster is None or c.shard_id not in st.cluster.tn_shard_ids():
                raise UnknownReplicaError(f"{k.name}: no TN shard {c.shard_id}")
            if k == CommandType.STOP_TN and c.shard_id not in target.tn_shards():
                raise UnknownReplicaError(f"STOP_TN: store {c.target!r} does not run TN shard {c.shard_id}")
            return
        if want != StoreRole.LOG:
            return
        shard = st.shards.get(c.shard_id)
        if shard is None:
            raise UnknownReplicaError(f"{k.name}: no log shard {c.shard_id}")
        rid = c.replica_id
        if k in (CommandType.ADD_REPLICA, CommandType.ADD_NON_VOTING_REPLICA):
            host = st.stores.get(c.replica_store)
            if host is None or host.role != StoreRole.LOG:
                raise UnknownStoreError(f"{k.name}: no registered log store {c.replica_store!r} to add to")
            if k == CommandType.ADD_REPLICA and not c.learner and rid not in shard.learners:
                raise UnknownReplicaError(f"ADD_REPLICA (promote): replica {rid} is not a learner of shard "
                                          f"{c.shard_id}")
        elif k == CommandType.REMOVE_REPLICA:
            if rid not in shard.voters:
                raise UnknownReplicaError(f"REMOVE_REPLICA: replica {rid} is not a voter of shard {c.shard_id}")
        elif k == CommandType.REMOVE_NON_VOTING_REPLICA:
            if rid not in shard.learners:
                raise UnknownReplicaError(f"{k.name}: replica {rid} is not a learner of shard {c.shard_id}")
        elif k in (CommandType.START_REPLICA, CommandType.START_NON_VOTING_REPLICA):
            members = dict(c.members) if c.members else shard.members()
            if members.get(rid) != c.target:
                raise UnknownReplicaError(f"{k.name}: replica {rid} of shard {c.shard_id} is not a member on "
                                          f"store {c.target!r}")
        else:   # STOP_*, KILL_ZOMBIE: the store must be running that replica
            rep = target.log_replicas().get(c.shard_id)
            if rep is None or rep.replica_id != rid:
                raise UnknownReplicaError(f"{k.name}: store {c.target!r} runs no replica {rid} of shard {c.shard_id}")


_TARGET_ROLE = {
    CommandType.ADD_REPLICA: StoreRole.LOG, CommandType.REMOVE_REPLICA: StoreRole.LOG,
    CommandType.START_REPLICA: StoreRole.LOG, CommandType.STOP_REPLICA: StoreRole.LOG,
    CommandType.KILL_ZOMBIE: StoreRole.LOG, CommandType.ADD_NON_VOTING_REPLICA: StoreRole.LOG,
    CommandType.REMOVE_NON_VOTING_REPLICA: StoreRole.LOG, CommandType.START_NON_VOTING_REPLICA: StoreRole.LOG,
    CommandType.STOP_NON_VOTING_REPLICA: StoreRole.LOG, CommandType.START_TN: StoreRole.TN,
    CommandType.STOP_TN: StoreRole.TN, CommandType.DELETE_CN_STORE: StoreRole.CN,
    CommandType.DROP_RO_NODE: StoreRole.RO,
}
