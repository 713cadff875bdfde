"""RaftNode: one Raft replica inside a process: a RawNode, its DiskStorage, a RaftTransport and a
state machine (engine/statemachine.py's RSM interface), driven by one thread.

The thread is the only one that touches the core. Each turn it takes everything queued (messages,
proposals, reads, membership changes), ticks on the wall clock, then runs the Ready loop:
save(rd) to disk (fsync) -> advance -> send -> apply. Proposals queued while a Ready is being
written go out together in the next one, so one fsync covers many appends (group commit).

Every request carries a deadline and ends in a result or a typed error (NotLeader with the
leader's id, ProposalDropped, RaftTimeout, RaftStopped).
"""
from __future__ import annotations

import io
import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable

from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import MembershipRefused, NotLeader, ProposalDropped, RaftError, RaftStopped, RaftTimeout
from logtide.engine.raft.messages import ConfChange, ConfState
from logtide.engine.raft.progress import REPLICATE, SNAPSHOT
from logtide.engine.raft.raft import Config
from logtide.engine.raft.raw_node import RawNode
from logtide.engine.nodehost.proposal_group import OneProposal, ProposalGroup
from logtide.engine.nodehost.transport import RaftTransport
from logtide.engine.statemachine import Entry as SMEntry
from logtide.engine.statemachine import StateMachine
from logtide.arg_checks import seconds_arg
from logtide.errors import InvalidArgument

log = logging.getLogger("logtide.raft")
# one line per role change: a leader lost to check-quorum shows as "follower, leader 0" in the same term
role_log = logging.getLogger("logtide.raft.role")

TICK_INTERVAL = 0.1      # seconds per tick
MIN_TICK_INTERVAL = 0.001  # shorter ticks only spin the driver: a peer's round trip is longer
ELECTION_TICK = 6        # 0.6-1.2 s without a leader before a follower campaigns
HEARTBEAT_TICK = 1       # the leader's heartbeat every tick
SNAPSHOT_ENTRIES = 20000  # applied entries between state machine snapshots (then the log is compacted)
COMPACT_KEEP = 5000      # entries kept below the snapshot, so a briefly lagging follower needs no snapshot
STATUS_INTERVAL = 0.005  # the published status is at most this old (a role change publishes at once)
# a commit advance alone waits this long for an APP with entries to carry it to the followers before
# it goes out alone (under load the next proposal comes sooner: one APP and one APP_RESP per
# follower saved per commit); followers apply at most this much later when the log goes quiet
COMMIT_LINGER = 0.003
# APPs in flight to one follower: while they are out, new entries gather in the leader's log and go
# in the next APP, so a busy leader sends fewer, fuller messages (with 32 clients: ~5 -> 7-11
# entries per follower Ready, follower CPU per append ~195 -> ~100-150 us); a lone client never fills it
MAX_INFLIGHT = 2
# Group commit of proposals: a leader holds new proposals back, for at most PROPOSAL_LINGER, while
# earlier ones are not yet applied or fewer have arrived than it recently had in flight at once. Its
# clients then move in one group rather than several interleaved ones (32 lockstep clients: batches
# of ~28 instead of ~8, a quarter of the Readys, fsyncs and APPs per append; leader CPU per append
# ~90 -> ~58 us, and ~30 % more appends/s at 4, 16 and 32 clients: docs/raft.md). A lone client is
# never held.
PROPOSAL_LINGER = 0.002
PEAK_DECAY = 0.95          # per batch: a peak that fewer clients no longer reach fades in a few dozen


_WAKE = ("wake",)   # an inbox item that only wakes the driver (proposals wait in RaftNode._props)


class Future:
    """The outcome of one request, set by the driver thread; `on_done(future)`, if given, is called
    once it is set (on the setting thread: it must be quick and must not block)."""
    __slots__ = ("_ev", "value", "error", "index", "term", "on_done")

    def __init__(self, on_done: Callable[["Future"], None] | None = None) -> None:
        self._ev = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.index = 0
        self.term = 0
        self.on_done = on_done

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        if not self._ev.is_set():
            self.value, self.error = value, error
            self._ev.set()
            if self.on_done is not None:
                try:
                    self.on_done(self)
                except Exception:  # noqa: BLE001 - a caller's bug must not stop the driver
                    log.exception("raft node: a completion callback failed")

    def done(self) -> bool:
        return self._ev.is_set()

    def wait(self, timeout: float, what: str) -> Any:
        if not self._ev.wait(timeout):
            raise RaftTimeout(f"{what} did not finish within {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.value


class RaftNode:
    def __init__(self, node_id: int, storage, sm: StateMachine, *, peers: dict[int, Any] | None = None,
                 cluster_id: int = 1, tick_interval: float = TICK_INTERVAL, election_tick: int = ELECTION_TICK,
                 heartbeat_tick: int = HEARTBEAT_TICK, snapshot_entries: int = SNAPSHOT_ENTRIES,
                 compact_keep: int = COMPACT_KEEP, seed: int | None = None, compact_bound=None,
                 proposal_linger: float = PROPOSAL_LINGER) -> None:
        tick_interval = seconds_arg("tick_interval", tick_interval, allow_none=False)
        self.proposal_linger = seconds_arg("proposal_linger", proposal_linger, allow_none=False, zero="never held")
        if tick_interval < MIN_TICK_INTERVAL:
            raise InvalidArgument(f"tick_interval must be >= {MIN_TICK_INTERVAL:g} s, got {tick_interval!r}")
        self.id = node_id
        self.storage = storage
        self.sm = sm
        self.tick_interval = tick_interval
        self.snapshot_entries = snapshot_entries
        self.compact_keep = compact_keep
        self.compact_bound = compact_bound  # () -> the highest index the application lets go of
        snap = storage.snapshot()
        applied = snap.meta.index
        if snap.data:
            sm.recover_from_snapshot(io.BytesIO(snap.data))
        cfg = Config(node_id, election_tick=election_tick, heartbeat_tick=heartbeat_tick,
                     seed=seed if seed is not None else int(time.time_ns() % (1 << 31)), lazy_commit=True,
                     max_inflight=MAX_INFLIGHT)
        self.raw = RawNode(cfg, storage, applied=applied)
        self.applied = applied
        self.commit = self.raw.raft.log.committed   # live, for status(): set before any request completes
        self.last_index = self.raw.raft.log.last_index()
        self.first_index = self.raw.raft.log.first_index()   # live too: it moves with applied at a snapshot install
        self.snapshot_index = applied
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # before the transport: its threads report here
        self.transport = RaftTransport(node_id, cluster_id, self._deliver, self._unreachable, self._gone)
        self.addresses: dict[int, Any] = {}
        for pid, target in (peers or {}).items():
            if pid != node_id:
                self.addresses[pid] = target
                self.transport.set_peer(pid, target)
        self._pending: dict[int, Future] = {}         # index -> proposal waiting to be applied
        self._held: list[tuple[bytes, Future]] = []   # proposals held while no follower can take an APP
        # proposals handed over by other threads: a deque the driver drains each turn, so a submitter
        # wakes the driver only when it is not holding proposals anyway (see _hold)
        self._props: deque[list[tuple[bytes, Any]]] = deque()
        self._holding = False
        self._props_n = 0            # about the commands in _props (submitters' wake-up hint)
        self._linger_until = 0.0     # held proposals go out by then at the latest (see _linger)
        self._lingering = False      # the driver holds proposals for the linger (not for full windows)
        self._peak = 1.0             # proposals in flight at once, as recently seen (decaying)
        self._wake_at = 0            # a lingering driver is woken when this many are queued and held
        self._reads: dict[bytes, Future] = {}         # ReadIndex context -> read waiting for its index
        self._read_wait: list[tuple[int, Future]] = []  # (index, read) waiting for applied >= index
        self._seq = 0
        self.readies = self.ready_entries = 0  # Readys handled and the entries they persisted (batching)
        self.proposal_batches = self.proposed = 0  # proposal batches this leader made, and their commands
        self.lingered = 0                          # of them, held back by the linger first
        self._status_dirty, self._status_at = True, 0.0
        self._status: dict = {}
        self._stop = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"raft-node-{node_id}", daemon=True)
        self._publish_status()  # a status request may come before the driver's first turn

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> "RaftNode":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._inbox.put(("wake",))
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.transport.close()
        err = RaftStopped(f"raft node {self.id} stopped")
        for f in self._waiters():
            f.set(error=err)

    def _waiters(self) -> list[Future]:
        return list(self._pending.values()) + list(self._reads.values()) + [f for _i, f in self._read_wait] \
            + [f for _c, f in self._held] + [f for pairs in list(self._props) for _c, f in pairs]

    def _check(self) -> None:
        if self._failed is not None:
            raise RaftStopped(f"raft node {self.id} failed: {self._failed!r}") from self._failed
        if self._stop.is_set():
            raise RaftStopped(f"raft node {self.id} is stopped")

    # --- requests (any thread) -----------------------------------------------------------------------

    def propose(self, cmd: bytes, timeout: float = 5.0) -> tuple[int, Any]:
        """Replicate a command; returns (index, the state machine's result) once applied here."""
        index, _term, value = self.propose_with_term(cmd, timeout)
        return index, value

    def propose_with_term(self, cmd: bytes, timeout: float = 5.0) -> tuple[int, int, Any]:
        """propose, also naming the term of the committed entry (the leadership that appended it)."""
        self._check()
        f = Future()
        self._submit([(bytes(cmd), f)])
        value = f.wait(timeout, f"proposal to raft node {self.id}")
        return f.index, f.term, value

    def submit_many(self, cmds: list[bytes], on_done: Callable[[Future], None] | None = None) -> list[Future]:
        """Queue several commands for replication without waiting (one hand-off to the driver);
        commands submitted one call after another are appended in that order. Wait on each
        Future, or have `on_done(future)` called as each is set: its value is the state machine's
        result, its index the entry's."""
        self._check()
        fs = [Future(on_done) for _ in cmds]
        self._submit([(bytes(c), f) for c, f in zip(cmds, fs)])
        return fs

    def submit_group(self, cmds: list[bytes], done: Callable[[list], None]) -> None:
        """Queue several commands for replication (one hand-off to the driver, in order after
        earlier submissions); `done(results)` is called once, when every one is applied or failed,
        with each command's state machine result or its exception. Nothing per command waits."""
        self._check()
        if len(cmds) == 1:
            self._submit([(cmds[0], OneProposal(done))])
            return
        group = ProposalGroup(len(cmds), done)
        if not cmds:
            done(group.results)
            return
        self._submit(list(zip(cmds, group.members())))

    def _submit(self, pairs: list) -> None:
        self._props.append(pairs)
        self._props_n += len(pairs)
        # a holding driver takes them when an acknowledgement (or its linger's end) wakes it, or
        # once as many have come as it lingers for
        if not self._holding or (self._wake_at and self._props_n + len(self._held) >= self._wake_at):
            self._inbox.put(_WAKE)

    def propose_many(self, cmds: list[bytes], timeout: float = 5.0) -> list[tuple[int, Any] | BaseException]:
        """Replicate several commands at once (one hand-off to the driver, one Ready, one fsync);
        each gets (index, result) or its own error, as propose would give."""
        fs = self.submit_many(cmds)
        end = time.monotonic() + timeout
        out: list = []
        for f in fs:
            try:
                value = f.wait(max(0.0, end - time.monotonic()), f"proposal to raft node {self.id}")
                out.append((f.index, value))  # the index only once the driver set it (after wait)
            except Exception as exc:  # noqa: BLE001 - this command's own error (a refused command too)
                out.append(exc)
        return out

    def read_index(self, timeout: float = 5.0) -> int:
        """A linearizable read barrier: returns once this replica applied everything committed when
        the call began (confirmed by a heartbeat quorum); then read the state machine."""
        self._check()
        f = Future()
        self._inbox.put(("read", f))
        return f.wait(timeout, f"read index on raft node {self.id}")

    def leader_read_index(self, timeout: float = 5.0) -> tuple[int, int]:
        """read_index confirmed by this replica as the leader: (index, term), the term being the
        leadership the heartbeat quorum confirmed after the call began. NotLeader on any other replica."""
        self._check()
        f = Future()
        self._inbox.put(("read", f, True))
        index = f.wait(timeout, f"leader read index on raft node {self.id}")
        return index, f.term

    def change_membership(self, cc: ConfChange, timeout: float = 10.0) -> int:
        self._check()
        f = Future()
        self._inbox.put(("conf", cc, f))
        f.wait(timeout, f"membership change {cc} on raft node {self.id}")
        return f.index

    def transfer_leader(self, to: int) -> None:
        self._check()
        self._inbox.put(("transfer", to))

    def status(self) -> dict:
        """Role, term, leader, commit and applied index (and each follower's match on the leader).
        commit, applied, last_index and first_index are never behind anything this replica
        acknowledged: the driver sets them before it completes a request, so a status whose applied
        index comes from an installed snapshot also shows the log starting after it (the rest may
        be a few ms old). A node whose driver stopped on an error has "failed": that error."""
        st = dict(self._status)
        st["commit"], st["last_index"], st["applied"] = self.commit, self.last_index, self.applied
        st["first_index"] = self.first_index
        if self._failed is not None:
            st["failed"] = f"{type(self._failed).__name__}: {self._failed}"
        return st

    @property
    def leader(self) -> int:
        return self._status.get("lead", 0)

    def is_leader(self) -> bool:
        return self._status.get("role") == "leader"

    # --- transport callbacks -----------------------------------------------------------------------

    def _deliver(self, msgs) -> None:
        if self._failed is None:   # a stopped driver takes nothing: its inbox would only grow
            self._inbox.put(("msgs", msgs))

    def _unreachable(self, peer: int) -> None:
        self._inbox.put(("unreachable", peer))

    def _gone(self, peer: int) -> None:
        self._inbox.put(("gone", peer))

    # --- the driver thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a disk failure: stop taking requests, keep the process up
            self._failed = exc
            log.exception("raft node %d stopped on an error", self.id)
            err = RaftStopped(f"raft node {self.id} failed: {exc!r}")
            for f in self._waiters():
                f.set(error=err)

    def _loop(self) -> None:
        raw = self.raw
        next_tick = time.monotonic() + self.tick_interval
        self._publish_status()
        commit_due = None  # when a commit no APP carried yet goes out alone (COMMIT_LINGER)
        while not self._stop.is_set():
            wait = (next_tick if commit_due is None else min(next_tick, commit_due)) - time.monotonic()
            if (self._props or self._held) and not self._holding:  # nothing may wake us for these
                wait = 0.0
            elif self._lingering:
                wait = min(wait, self._linger_until - time.monotonic())
            items = []
            try:
                items.append(self._inbox.get(timeout=max(0.0, wait)) if wait > 0 else self._inbox.get_nowait())
            except queue.Empty:
                pass
            while True:
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                self._handle(item)
            props = self._props
            while props:
                self._held.extend(props.popleft())
            # a hint only: a count a racing submitter left too high costs one early wake-up
            self._props_n = 0
            now = time.monotonic()
            if self._held and not self._hold() and not self._linger(now):
                self._propose_held()
            if now >= next_tick:
                raw.tick()
                next_tick += self.tick_interval
                if next_tick < now:  # a long stall (slow disk): do not replay missed ticks in a burst
                    next_tick = now + self.tick_interval
            if commit_due is not None and now >= commit_due:
                raw.flush_commit()
            while raw.has_ready():
                self._ready_once()
            if not raw.commit_unsent:
                commit_due = None
            elif commit_due is None:
                commit_due = now + COMMIT_LINGER
            if self._status_dirty or now - self._status_at >= STATUS_INTERVAL:
                self._publish_status()
                self._status_dirty, self._status_at = False, now
            # applying may have emptied what was pending: held proposals go at the next turn
            full = self._hold()
            self._lingering = not full and bool(self._held) and self._linger(now)
            self._holding = full or self._lingering

    def _handle(self, item) -> None:
        kind = item[0]
        raw = self.raw
        try:
            if kind == "msgs":
                for m in item[1]:
                    try:
                        raw.step(m)
                    except RaftError as exc:
                        log.warning("raft node %d: refused %r: %s", self.id, m, exc)
            elif kind == "read":
                if len(item) > 2 and raw.raft.state != M.LEADER:  # leader_read_index: no forwarding
                    item[1].set(error=NotLeader(f"raft node {self.id} is not the leader", raw.raft.lead))
                    return
                item[1].term = raw.raft.term
                self._seq += 1
                ctx = b"%d-%d" % (self.id, self._seq)
                self._reads[ctx] = item[1]
                raw.read_index(ctx)
                if raw.raft.state not in (M.LEADER, M.FOLLOWER) or raw.raft.lead == 0:
                    self._reads.pop(ctx)
                    item[1].set(error=NotLeader(f"raft node {self.id} knows no leader to confirm a read", 0))
            elif kind == "conf":
                f = item[2]
                try:
                    f.index, f.term = raw.propose_conf_change(item[1])
                    self._pending[f.index] = f
                except (ProposalDropped, MembershipRefused) as exc:
                    f.set(error=exc)
            elif kind == "transfer":
                raw.transfer_leader(item[1])
            elif kind == "gone":           # a dead leader's followers need not wait out its lease
                raw.report_leader_gone(item[1])
            elif kind == "unreachable":
                pr = raw.raft.prs.get(item[1])
                if pr is not None:
                    if pr.state == SNAPSHOT:  # the snapshot may have been lost with the stream
                        raw.report_snapshot(item[1], False)
                    raw.report_unreachable(item[1])
        except RaftError as exc:
            log.warning("raft node %d: %s: %s", self.id, kind, exc)

    def _hold(self) -> bool:
        """Hold new proposals while this leader has followers and every one of them has its APP
        window full: their entries could not be sent before an acknowledgement frees a slot anyway,
        and proposed together then they take one Ready, one fsync and one APP per follower."""
        r = self.raw.raft
        if r.state != M.LEADER:
            return False
        voters, me, others = r.conf.voters, self.id, False
        for i, pr in r.prs.items():   # twice a turn: no list, no generator
            if i != me and i in voters:
                if pr.state != REPLICATE or not pr.inflights.full():
                    return False
                others = True
        return others

    def _linger(self, now: float) -> bool:
        """Hold the held proposals a little longer (see PROPOSAL_LINGER): this leader has earlier
        proposals not yet applied (whose clients come back once they are), or fewer are held than
        it recently had in flight; and they have not waited proposal_linger yet."""
        # held beside pending ones are in flight together too: counted only at proposal, two halves
        # of a group that alternate (one applied just as the other goes) would never merge again
        waiting = len(self._held) + len(self._pending)
        if waiting > self._peak:
            self._peak = waiting
        if self.raw.raft.state != M.LEADER or (not self._pending and len(self._held) >= self._peak - 0.5):
            self._linger_until = 0.0
            return False
        if not self._linger_until:
            self._linger_until = now + self.proposal_linger
            self.lingered += 1
        if now >= self._linger_until:
            return False
        # waiting for the count only: a submitter that completes it wakes the driver
        self._wake_at = 0 if self._pending else int(self._peak + 0.5)
        return True

    def _propose_held(self) -> None:
        self._peak = max(self._peak * PEAK_DECAY, len(self._held) + len(self._pending))
        held, self._held = self._held, []
        self._linger_until = 0.0
        self._wake_at = 0
        self.proposal_batches += 1
        self.proposed += len(held)
        raw = self.raw
        pending = self._pending
        if len(held) > 1:
            try:   # one append for the lot; refused as a whole, each is tried alone below
                first, term = raw.propose_many([cmd for cmd, _f in held])
            except ProposalDropped:
                pass
            else:
                for k, (_cmd, f) in enumerate(held):
                    f.index, f.term = first + k, term
                    pending[first + k] = f
                return
        for cmd, f in held:
            try:
                f.index, f.term = raw.propose(cmd)
                self._pending[f.index] = f
            except ProposalDropped as exc:  # NotLeader too
                f.set(error=exc)

    def _ready_once(self) -> None:
        raw = self.raw
        rd = raw.ready()
        self.readies += 1
        if rd.soft_state is not None:
            self._status_dirty = True
            role_log.info("raft node %d: %s, term %d, leader %d", self.id, M.ROLE_NAMES[rd.soft_state.role],
                          raw.raft.term, rd.soft_state.lead)
        self.ready_entries += len(rd.entries)
        if rd.send_now:  # the leader's appends: replicated while its own write is under way
            self.transport.send(rd.send_now)
        self.storage.save(rd)  # durable before anything that depends on it leaves (the contract)
        if rd.snapshot is not None:
            self.sm.recover_from_snapshot(io.BytesIO(rd.snapshot.data))
            self.applied = self.snapshot_index = rd.snapshot.meta.index
        out = raw.advance(rd)
        # before any ack below: a status read after an ack must show at least its index
        self.commit, self.last_index = raw.raft.log.committed, raw.raft.log.last_index()
        self.first_index = raw.raft.log.first_index()
        if out.messages:
            self._send(out.messages)
        if out.committed_entries:
            self._apply_all(out.committed_entries)
        for rs in out.read_states:
            f = self._reads.pop(rs.context, None)
            if f is not None:
                self._read_wait.append((rs.index, f))
        if self._read_wait:
            still = []
            for idx, f in self._read_wait:
                if self.applied >= idx:
                    f.set(idx)
                else:
                    still.append((idx, f))
            self._read_wait = still
        if rd.soft_state is not None and rd.soft_state.role != M.LEADER and self._reads:
            err = NotLeader(f"raft node {self.id} lost leadership", rd.soft_state.lead)
            for f in self._reads.values():
                f.set(error=err)
            self._reads.clear()
        self._maybe_snapshot()

    def _send(self, msgs) -> None:
        # a snapshot counts as delivered when the follower answers it (APP_RESP); a failed stream
        # reports it lost (see "unreachable"), so the leader retries
        self.transport.send(msgs)

    def _apply_all(self, ents) -> None:
        update = self.sm.update
        pop = self._pending.pop
        conf = M.ENTRY_CONF
        for e in ents:
            result: Any = None
            error: BaseException | None = None
            if e.type == conf:
                self._apply_conf(e)
                self._publish_status()   # before the change's ack: a status read after it shows the membership
            elif e.data:
                try:
                    result = update(SMEntry(e.index, e.data))
                except Exception as exc:  # a refused command (e.g. a bad truncate): the same on every replica
                    error = exc
            self.applied = e.index
            f = pop(e.index, None)
            if f is not None:
                if f.term != e.term:
                    f.set(error=ProposalDropped(f"entry {e.index} was replaced by a new leader's entry; retry"))
                else:
                    f.set(result, error)

    def _apply_conf(self, e) -> None:
        try:
            cc = ConfChange.decode(e.data)
        except RaftError:
            return
        if cc.node_id == self.id:
            return
        if cc.op == M.REMOVE:
            self.addresses.pop(cc.node_id, None)
            self.transport.remove_peer(cc.node_id)
        elif cc.context:
            target = cc.context.decode()
            self.addresses[cc.node_id] = target
            self.transport.set_peer(cc.node_id, target)

    def _maybe_snapshot(self) -> None:
        if self.applied - self.snapshot_index < self.snapshot_entries:
            return
        buf = io.BytesIO()
        self.sm.save_snapshot(buf)
        idx = self.applied
        self.storage.create_snapshot(idx, self.raw.conf_at(idx), buf.getvalue())
        upto = idx - self.compact_keep
        if self.compact_bound is not None:
            upto = min(upto, self.compact_bound())
        if upto > 0:
            self.storage.compact(upto)
        self.raw.compacted()
        self.first_index = self.raw.raft.log.first_index()
        self.snapshot_index = idx

    def _publish_status(self) -> None:
        st = self.raw.status()
        st["addresses"] = {k: v for k, v in self.addresses.items() if isinstance(v, str)}
        st["readies"], st["ready_entries"] = self.readies, self.ready_entries
        st["proposal_batches"], st["proposed"], st["lingered"] = self.proposal_batches, self.proposed, self.lingered
        self._status = st

    def conf(self) -> ConfState:
        return self.raw.raft.conf
