"""The typed errors of the Raft core and its drivers (all are LogtideErrors)."""
from logtide.errors import CorruptionError, InvalidArgument, LogtideError


class RaftError(LogtideError):
    """Base of the Raft errors."""


class ProposalDropped(RaftError):
    """A proposal was not appended: this node is not the leader, a transfer is running, or a
    membership change must wait (one at a time, only after the leader committed in its term)."""


class MembershipRefused(RaftError, InvalidArgument):
    """A membership change that cannot succeed as asked, on any leader: the node is already a
    member (or voter), is not a member, or is the last voter. Not retried, unlike ProposalDropped."""


class NotLeader(ProposalDropped):
    """The request needs the leader; `leader` names the one this node knows of (0 = none)."""

    def __init__(self, message: str, leader: int = 0) -> None:
        super().__init__(message)
        self.leader = leader


class ReadyOutstanding(RaftError):
    """step/tick/propose was called between ready() and advance(): the persist-before-send
    contract lets nothing change the node while a Ready is being made durable."""


class CompactedError(RaftError):
    """The requested log index is below the first index still in storage (compacted)."""


class UnavailableError(RaftError):
    """The requested log index is beyond the last index in storage."""


class MalformedMessage(RaftError, InvalidArgument):
    """A Raft message is malformed: unknown type, impossible index or term, bad field types."""


class UnknownPeer(RaftError, InvalidArgument):
    """A Raft message came from (or is addressed to) a node that is not a known member."""


class CorruptRaftEntry(RaftError, CorruptionError):
    """A Raft entry failed its CRC or framing, on disk or on the wire; it is never applied."""


class DivergedLog(CorruptionError):
    """An entry this replica committed is not in its leader's log. Raft's peers never cause it (a
    leader holds every committed entry); a forged message or a lost write can. Retrying cannot
    help (the leader would probe below the commit index forever), so the replica stops. Not a
    RaftError: a driver logs those and goes on, and this one must stop it."""


class SafetyViolation(RaftError, AssertionError):
    """The simulator (or a real-process test) saw one of Raft's safety properties broken."""


class RaftTimeout(RaftError, TimeoutError):
    """A request to a Raft replica did not finish within its deadline (it may still take effect)."""


class RaftStopped(RaftError):
    """The Raft replica is stopped (or failed); it takes no more requests."""
