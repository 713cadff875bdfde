"""The Raft core's vocabulary: entries, hard state, membership, snapshots and messages.

Plain slotted classes with int constants (not Enums): the core steps hundreds of thousands of
messages per simulator run, and int comparisons are what it does most.
"""
from __future__ import annotations

# --- message types ----------------------------------------------------------------------------
# Local messages (term 0) never cross the network: the driver feeds them to its own node.
HUP = 0              # local: start an election (pre-vote first when enabled)
BEAT = 1             # local: the leader broadcasts heartbeats
PROP = 2             # local: propose entries
APP = 3              # leader -> follower: append entries after (index, log_term)
APP_RESP = 4         # follower -> leader: appended up to index, or rejected with a hint
VOTE = 5
VOTE_RESP = 6
PRE_VOTE = 7
PRE_VOTE_RESP = 8
SNAP = 9             # leader -> follower: install a snapshot
HEARTBEAT = 10
HEARTBEAT_RESP = 11
TIMEOUT_NOW = 12     # leader -> transferee: campaign now, skipping pre-vote and the lease check
READ_INDEX = 13      # local (or follower -> leader): a linearizable read at the commit index
READ_INDEX_RESP = 14  # leader -> follower: the read index of a forwarded request
TRANSFER_LEADER = 15  # local: hand leadership to m.frm
UNREACHABLE = 16     # local: the transport could not reach m.frm
SNAP_STATUS = 17     # local: sending a snapshot to m.frm finished (reject = failed)

MSG_NAMES = ("HUP", "BEAT", "PROP", "APP", "APP_RESP", "VOTE", "VOTE_RESP", "PRE_VOTE", "PRE_VOTE_RESP",
             "SNAP", "HEARTBEAT", "HEARTBEAT_RESP", "TIMEOUT_NOW", "READ_INDEX", "READ_INDEX_RESP",
             "TRANSFER_LEADER", "UNREACHABLE", "SNAP_STATUS")
LOCAL_TYPES = frozenset((HUP, BEAT, PROP, TRANSFER_LEADER, UNREACHABLE, SNAP_STATUS))
NETWORK_TYPES = frozenset(range(len(MSG_NAMES))) - LOCAL_TYPES - {BEAT}
RESPONSE_TYPES = frozenset((APP_RESP, VOTE_RESP, PRE_VOTE_RESP, HEARTBEAT_RESP, READ_INDEX_RESP))

# --- entry types -------------------------------------------------------------------------------
ENTRY_NORMAL = 0     # a command for the state machine (empty data: the leader's no-op)
ENTRY_CONF = 1       # a membership change (data = ConfChange.encode())

# --- roles -------------------------------------------------------------------------------------
FOLLOWER, PRE_CANDIDATE, CANDIDATE, LEADER = 0, 1, 2, 3
ROLE_NAMES = ("follower", "pre-candidate", "candidate", "leader")

# the context of a VOTE sent on a leadership transfer: receivers skip their leader lease
CAMPAIGN_TRANSFER = b"transfer"


class Entry:
    """One log entry: (term, index, type, data)."""
    __slots__ = ("term", "index", "type", "data")

    def __init__(self, term: int, index: int, type: int = ENTRY_NORMAL, data: bytes = b"") -> None:
        self.term = term
        self.index = index
        self.type = type
        self.data = data

    def size(self) -> int:
        return len(self.data) + 24

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Entry) and self.term == other.term and self.index == other.index
                and self.type == other.type and self.data == other.data)

    def __hash__(self) -> int:
        return hash((self.term, self.index, self.type, self.data))

    def __repr__(self) -> str:
        kind = "conf" if self.type == ENTRY_CONF else "normal"
        return f"Entry(t{self.term} i{self.index} {kind} {len(self.data)}B)"


class HardState:
    """What a node must persist before it speaks: current term, vote in that term, commit index."""
    __slots__ = ("term", "vote", "commit")

    def __init__(self, term: int = 0, vote: int = 0, commit: int = 0) -> None:
        self.term = term
        self.vote = vote
        self.commit = commit

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, HardState) and self.term == other.term and self.vote == other.vote
                and self.commit == other.commit)

    def __repr__(self) -> str:
        return f"HardState(term={self.term}, vote={self.vote}, commit={self.commit})"


class ConfState:
    """A membership: the voters and the non-voting learners (disjoint sets of node ids)."""
    __slots__ = ("voters", "learners")

    def __init__(self, voters=(), learners=()) -> None:
        self.voters = frozenset(voters)
        self.learners = frozenset(learners) - self.voters

    def members(self) -> frozenset:
        return self.voters | self.learners

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfState) and self.voters == other.voters and self.learners == other.learners

    def __hash__(self) -> int:
        return hash((self.voters, self.learners))

    def __repr__(self) -> str:
        return f"ConfState(voters={sorted(self.voters)}, learners={sorted(self.learners)})"


# --- membership changes (one member at a time) --------------------------------------------------
ADD_LEARNER = 0  # a new member that receives the log but does not vote
ADD_VOTER = 1    # promote a learner (or add a voter directly)
REMOVE = 2       # remove a voter or a learner
CONF_OP_NAMES = ("add_learner", "add_voter", "remove")


class ConfChange:
    """One membership change; carried in an ENTRY_CONF entry as b"<op>:<node id>[:<context>]"
    (the context is opaque to the core: the service puts the new member's address there)."""
    __slots__ = ("op", "node_id", "context")

    def __init__(self, op: int, node_id: int, context: bytes = b"") -> None:
        self.op = op
        self.node_id = node_id
        self.context = context

    def encode(self) -> bytes:
        base = b"%d:%d" % (self.op, self.node_id)
        return base + b":" + self.context if self.context else base

    @classmethod
    def decode(cls, data: bytes) -> "ConfChange":
        from logtide.engine.raft.errors import MalformedMessage
        try:
            parts = bytes(data).split(b":", 2)
            cc = cls(int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else b"")
        except ValueError:
            raise MalformedMessage(f"malformed membership change {bytes(data[:40])!r}") from None
        if cc.op not in (ADD_LEARNER, ADD_VOTER, REMOVE) or cc.node_id <= 0:
            raise MalformedMessage(f"malformed membership change {bytes(data[:40])!r}")
        return cc

    def apply(self, conf: ConfState) -> ConfState:
        """The membership after this change."""
        voters, learners = set(conf.voters), set(conf.learners)
        if self.op == ADD_LEARNER:
            if self.node_id not in voters:
                learners.add(self.node_id)
        elif self.op == ADD_VOTER:
            learners.discard(self.node_id)
            voters.add(self.node_id)
        else:
            voters.discard(self.node_id)
            learners.discard(self.node_id)
        return ConfState(voters, learners)

    def __repr__(self) -> str:
        return f"ConfChange({CONF_OP_NAMES[self.op]} {self.node_id})"


class SnapshotMeta:
    """Where a snapshot sits in the log: the last index and term it covers, and the membership there."""
    __slots__ = ("index", "term", "conf")

    def __init__(self, index: int = 0, term: int = 0, conf: ConfState | None = None) -> None:
        self.index = index
        self.term = term
        self.conf = conf if conf is not None else ConfState()

    def __repr__(self) -> str:
        return f"SnapshotMeta(index={self.index}, term={self.term}, {self.conf})"


class Snapshot:
    """A state machine image at meta.index (data is opaque to the core)."""
    __slots__ = ("meta", "data")

    def __init__(self, meta: SnapshotMeta | None = None, data: bytes = b"") -> None:
        self.meta = meta if meta is not None else SnapshotMeta()
        self.data = data

    def is_empty(self) -> bool:
        return self.meta.index == 0

    def __repr__(self) -> str:
        return f"Snapshot({self.meta!r}, {len(self.data)}B)"


class Message:
    """One Raft message. Fields unused by a type keep their defaults."""
    __slots__ = ("type", "to", "frm", "term", "log_term", "index", "entries", "commit", "reject",
                 "reject_hint", "snapshot", "context")

    def __init__(self, type: int, to: int = 0, frm: int = 0, term: int = 0, log_term: int = 0, index: int = 0,
                 entries: list | None = None, commit: int = 0, reject: bool = False, reject_hint: int = 0,
                 snapshot: Snapshot | None = None, context: bytes = b"") -> None:
        self.type = type
        self.to = to
        self.frm = frm
        self.term = term
        self.log_term = log_term
        self.index = index
        self.entries = entries if entries is not None else []
        self.commit = commit
        self.reject = reject
        self.reject_hint = reject_hint
        self.snapshot = snapshot
        self.context = context

    def copy(self) -> "Message":
        m = Message(self.type, self.to, self.frm, self.term, self.log_term, self.index, list(self.entries),
                    self.commit, self.reject, self.reject_hint, self.snapshot, self.context)
        return m

    def __repr__(self) -> str:
        name = MSG_NAMES[self.type] if 0 <= self.type < len(MSG_NAMES) else str(self.type)
        extra = f" ents={len(self.entries)}" if self.entries else ""
        return (f"Msg({name} {self.frm}->{self.to} t{self.term} lt{self.log_term} i{self.index} c{self.commit}"
                f"{' reject' if self.reject else ''}{extra})")


class ReadState:
    """A ReadIndex answer: once applied >= index, a read tagged `context` is linearizable."""
    __slots__ = ("index", "context")

    def __init__(self, index: int, context: bytes) -> None:
        self.index = index
        self.context = context

    def __repr__(self) -> str:
        return f"ReadState({self.index}, {self.context!r})"
