"""RawNode: the driver's handle on one Raft node, and the Ready/advance contract.

The contract makes the ordering rule structural:

    rd = node.ready()                 # what must become durable: entries, hard state, snapshot
    send(rd.send_now)                 # only a leader's appends and heartbeats (see below)
    persist(rd)                       # the driver writes rd and fsyncs when rd.must_sync
    out = node.advance(rd)            # "rd is durable" -> only now: messages, committed entries, reads
    send(out.messages); apply(out.committed_entries)

A Ready does not expose its other messages at all: they come out of advance(), which the driver
calls to declare that the Ready is durable. The one exception is the leader's APPs and heartbeats
(`send_now`), and only when this Ready changes neither term nor vote: they depend on nothing the
Ready still has to write (the thesis's §10.2.1: a leader writes its log in parallel with sending
it), because the leader's own entries count toward commit only from advance() on. Nothing may step the node between ready() and advance()
(ReadyOutstanding), so every message handed out depends only on state that is on disk, and a
committed entry is handed to the state machine (and so acknowledged) only once it is durable here
and on a majority. The leader counts its own log toward commit only from advance() on.
"""
from __future__ import annotations

from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import MalformedMessage, ReadyOutstanding, UnknownPeer
from logtide.engine.raft.messages import ConfChange, ConfState, Entry, HardState, Message, ReadState, Snapshot
from logtide.engine.raft.raft import Config, Raft

_MAX_U64 = (1 << 64) - 1


class SoftState:
    """Volatile facts worth showing (not persisted): who leads and our role."""
    __slots__ = ("lead", "role")

    def __init__(self, lead: int, role: int) -> None:
        self.lead = lead
        self.role = role

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SoftState) and self.lead == other.lead and self.role == other.role

    def __repr__(self) -> str:
        return f"SoftState(lead={self.lead}, {M.ROLE_NAMES[self.role]})"


class Ready:
    """What the driver must make durable before calling advance(rd)."""
    __slots__ = ("soft_state", "hard_state", "entries", "snapshot", "must_sync", "send_now",
                 "_messages", "_read_states")

    def __init__(self) -> None:
        self.soft_state: SoftState | None = None
        self.hard_state: HardState | None = None      # None: unchanged
        self.entries: list[Entry] = []                 # append (replacing any conflicting suffix)
        self.snapshot: Snapshot | None = None          # install before the entries; restore the state machine from it
        self.must_sync = False                         # fsync before advance (term, vote, entries, snapshot changed)
        self.send_now: list[Message] = []              # the leader's appends and heartbeats: may go before the write
        self._messages: list[Message] = []
        self._read_states: list[ReadState] = []

    def is_empty(self) -> bool:
        return (self.hard_state is None and not self.entries and self.snapshot is None
                and not self._messages and not self._read_states)

    def __repr__(self) -> str:
        return (f"Ready(hs={self.hard_state}, entries={len(self.entries)}, snapshot={self.snapshot is not None}, "
                f"must_sync={self.must_sync})")


class Output:
    """What advance() releases once a Ready is durable."""
    __slots__ = ("messages", "committed_entries", "read_states", "soft_state")

    def __init__(self, messages, committed_entries, read_states, soft_state) -> None:
        self.messages: list[Message] = messages
        self.committed_entries: list[Entry] = committed_entries
        self.read_states: list[ReadState] = read_states
        self.soft_state: SoftState = soft_state


def validate(m: Message, self_id: int) -> None:
    """Reject a message from the network that no correct peer sends (MalformedMessage/UnknownPeer)."""
    t = m.type
    if not isinstance(t, int) or t not in M.NETWORK_TYPES and t != M.TRANSFER_LEADER:
        raise MalformedMessage(f"unknown or local-only message type {t!r}")
    for name in ("to", "frm", "term", "log_term", "index", "commit", "reject_hint"):
        v = getattr(m, name)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _MAX_U64:
            raise MalformedMessage(f"{M.MSG_NAMES[t]}: field {name} must be a u64, got {v!r}")
    if m.frm == 0:
        raise UnknownPeer(f"{M.MSG_NAMES[t]} from node 0")
    if m.to != self_id:
        raise UnknownPeer(f"{M.MSG_NAMES[t]} addressed to node {m.to}, this is node {self_id}")
    if m.term == 0 and t not in (M.READ_INDEX, M.TRANSFER_LEADER):
        raise MalformedMessage(f"{M.MSG_NAMES[t]} with term 0")
    if not isinstance(m.context, (bytes, bytearray)):
        raise MalformedMessage(f"{M.MSG_NAMES[t]}: context must be bytes")
    if m.entries:
        if t != M.APP:
            raise MalformedMessage(f"{M.MSG_NAMES[t]} carries entries")
        prev_term = m.log_term
        for k, e in enumerate(m.entries):
            if not isinstance(e, Entry) or e.index != m.index + 1 + k:
                raise MalformedMessage(f"APP entries are not contiguous after index {m.index}")
            if not isinstance(e.term, int) or e.term < prev_term or e.term > m.term:
                raise MalformedMessage(f"APP entry {e.index} has term {e.term} out of order (message term {m.term})")
            if e.type not in (M.ENTRY_NORMAL, M.ENTRY_CONF) or not isinstance(e.data, (bytes, bytearray)):
                raise MalformedMessage(f"APP entry {e.index}: bad type or data")
            prev_term = e.term
    if t == M.SNAP:
        s = m.snapshot
        if s is None or s.meta.index == 0 or s.meta.term == 0 or s.meta.term > m.term or not s.meta.conf.voters:
            raise MalformedMessage("SNAP without a valid snapshot (index, term and voters)")


class RawNode:
    """One Raft node driven by its owner: tick(), step(), propose(), read_index(), then the Ready loop."""

    def __init__(self, cfg: Config, storage, applied: int | None = None) -> None:
        self.raft = Raft(cfg, storage, applied)
        r = self.raft
        self._prev_hs = r.hard_state()
        self._prev_soft = SoftState(r.lead, r.state)
        self._rd: Ready | None = None

    @property
    def id(self) -> int:
        return self.raft.id

    def _idle(self) -> None:
        if self._rd is not None:
            raise ReadyOutstanding("a Ready is being persisted: call advance(rd) first")

    # --- inputs ----------------------------------------------------------------------------------

    def tick(self) -> None:
        self._idle()
        self.raft.tick()

    def step(self, m: Message) -> None:
        """Feed a message from the network (validated first: malformed ones raise, nothing changes)."""
        self._idle()
        validate(m, self.raft.id)
        self.raft.step(m)

    def campaign(self) -> None:
        self._idle()
        self.raft.step(Message(M.HUP))

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append a command (leader only); returns its (index, term). It is committed when an entry
        with this index and term comes out of advance() (another term there means it was lost)."""
        self._idle()
        last = self.raft.propose([Entry(0, 0, M.ENTRY_NORMAL, bytes(data))])
        return last, self.raft.term

    def propose_many(self, datas: list[bytes]) -> tuple[int, int]:
        """Append several commands at once; returns (first index, term)."""
        self._idle()
        last = self.raft.propose([Entry(0, 0, M.ENTRY_NORMAL, bytes(d)) for d in datas])
        return last - len(datas) + 1, self.raft.term

    def propose_conf_change(self, cc: ConfChange) -> tuple[int, int]:
        self._idle()
        last = self.raft.propose([Entry(0, 0, M.ENTRY_CONF, cc.encode())])
        return last, self.raft.term

    def read_index(self, ctx: bytes) -> None:
        """Ask for a linearizable read; its ReadState (index, ctx) comes out of advance() later."""
        self._idle()
        if not ctx:
            raise MalformedMessage("read_index needs a non-empty context")
        self.raft.step(Message(M.READ_INDEX, context=bytes(ctx)))

    def transfer_leader(self, to: int) -> None:
        self._idle()
        self.raft.step(Message(M.TRANSFER_LEADER, frm=to))

    def report_unreachable(self, peer: int) -> None:
        self._idle()
        self.raft.step(Message(M.UNREACHABLE, frm=peer))

    def report_leader_gone(self, peer: int) -> None:
        """The transport saw `peer`'s process gone (its address refused a connection). If `peer` is
        this follower's leader, the follower stops defending the leader's lease, so it campaigns
        at its randomized timeout and grants others' (pre-)votes at once, instead of one election
        timeout after the last heartbeat. Liveness only: safety never rests on timing."""
        self._idle()
        r = self.raft
        if r.state == M.FOLLOWER and r.lead == peer and peer != 0:
            r.election_elapsed = max(r.election_elapsed, r.cfg.election_tick)

    def report_snapshot(self, peer: int, ok: bool) -> None:
        self._idle()
        self.raft.step(Message(M.SNAP_STATUS, frm=peer, reject=not ok))

    def flush_commit(self) -> None:
        """Config.lazy_commit: send the followers the commit index no APP carried yet."""
        self._idle()
        self.raft.flush_commit()

    @property
    def commit_unsent(self) -> bool:
        """lazy_commit: the commit advanced and no APP told the followers yet."""
        return self.raft.commit_unsent

    def compacted(self) -> None:
        """Storage was compacted: forget membership changes below its first index."""
        self._idle()
        self.raft.prune_membership(self.raft.log.storage.first_index())

    # --- the Ready loop --------------------------------------------------------------------------

    def has_ready(self) -> bool:
        r = self.raft
        log = r.log
        return bool(r.msgs or log.unstable or log.pending_snapshot is not None or r.read_states
                    or r.bcast_pending
                    or log.committed > log.applied and log.applied < log.stable_last_index()
                    or (r.state == M.LEADER and r.prs.get(r.id) is not None
                        and r.prs[r.id].match < log.stable_last_index())
                    or self._prev_hs.term != r.term or self._prev_hs.vote != r.vote
                    or self._prev_hs.commit != log.committed
                    or self._prev_soft.lead != r.lead or self._prev_soft.role != r.state)

    def ready(self) -> Ready:
        self._idle()
        r = self.raft
        r.flush()
        log = r.log
        rd = Ready()
        soft = SoftState(r.lead, r.state)
        if soft != self._prev_soft:
            rd.soft_state = soft
        hs = r.hard_state()
        if hs != self._prev_hs:
            rd.hard_state = hs
            rd.must_sync = hs.term != self._prev_hs.term or hs.vote != self._prev_hs.vote
        if log.unstable:
            rd.entries = list(log.unstable)
            rd.must_sync = True
        if log.pending_snapshot is not None:
            rd.snapshot = log.pending_snapshot
            rd.must_sync = True
        msgs, r.msgs = r.msgs, []
        if r.state == M.LEADER and (rd.hard_state is None or not rd.must_sync or rd.hard_state.term ==
                                    self._prev_hs.term and rd.hard_state.vote == self._prev_hs.vote):
            # Raft thesis §10.2.1: a leader may write its log in parallel with replicating it. Its own
            # entries count toward commit only after advance(), and its term and vote are already durable
            # (checked above), so its appends and heartbeats depend on nothing this Ready still has to write.
            rd.send_now = [m for m in msgs if m.type == M.APP or m.type == M.HEARTBEAT]
            msgs = [m for m in msgs if m.type != M.APP and m.type != M.HEARTBEAT]
        rd._messages = msgs
        rd._read_states, r.read_states = r.read_states, []
        self._rd = rd
        return rd

    def advance(self, rd: Ready) -> Output:
        """Declare `rd` durable (and its entries/snapshot in storage); returns what may go out now."""
        if rd is not self._rd:
            raise ReadyOutstanding("advance() takes the Ready that ready() returned last")
        self._rd = None
        r = self.raft
        log = r.log
        if rd.snapshot is not None:
            log.snapshot_stable()
            log.applied_to(rd.snapshot.meta.index)
        if rd.entries:
            log.stable_to(rd.entries[-1].index)
        if rd.hard_state is not None:
            self._prev_hs = rd.hard_state
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        r.own_persisted()
        committed = log.next_committed(log.stable_last_index())
        if committed:
            log.applied_to(committed[-1].index)
        return Output(rd._messages, committed, rd._read_states, self._prev_soft)

    # --- inspection ------------------------------------------------------------------------------

    def status(self) -> dict:
        r = self.raft
        st = {"id": r.id, "role": M.ROLE_NAMES[r.state], "term": r.term, "lead": r.lead,
              "commit": r.log.committed, "applied": r.log.applied, "last_index": r.log.last_index(),
              "first_index": r.log.first_index(), "voters": sorted(r.conf.voters),
              "learners": sorted(r.conf.learners), "conf_index": r.membership[-1][0]}
        if r.state == M.LEADER:
            st["progress"] = {i: {"match": pr.match, "next": pr.next, "learner": pr.is_learner,
                                  "active": pr.recent_active or i == r.id}
                              for i, pr in sorted(r.prs.items())}
        return st

    def conf_at(self, index: int) -> ConfState:
        return self.raft.conf_at(index)
