"""The typed errors of logtide. Every error a user can meet derives from LogtideError."""


class LogtideError(Exception):
    """Base of every logtide error."""


class CorruptionError(LogtideError, ValueError):
    """Stored or received bytes failed verification (size, magic or CRC)."""


class CorruptBlockError(CorruptionError):
    """A fixed-size block (bloom block, table, page) is damaged or has the wrong size."""


class InvalidArgument(LogtideError, ValueError):
    """A request argument has the wrong type or an impossible value."""


class MetaError(LogtideError):
    """A meta-service request failed."""


class MetaInvalidArgument(MetaError, InvalidArgument, TypeError):
    """A meta-service request is malformed: wrong type, bad operator, oversize key or value. An
    InvalidArgument like any other refused argument, and a MetaError like the client's others."""


class MetaClosedError(MetaError):
    """The meta-service (or its client, or a watch stream) has been closed."""


class MetaUnavailableError(MetaError):
    """The meta-service could not be reached (connection refused, deadline exceeded)."""


class MetaNotLeader(MetaUnavailableError):
    """A meta replica could not serve a request that needs the leader: it knows no leader, or it
    was given a forwarded request without being the leader. Nothing was proposed, so the request
    may be sent again (to the leader the message names, when it names one)."""


class MetaForwardRefused(MetaNotLeader):
    """A forwarded request reached a replica that is not the leader: it is refused, not forwarded
    again (forwarding takes at most one hop, so two replicas with stale views cannot loop)."""


class MetaUnknownMember(MetaInvalidArgument):
    """A request names a replica id that is not a member of the meta-service group."""


class MetaMembershipRefused(MetaError):
    """A membership change of the meta-service group was refused before it was proposed: it would
    leave the voters without a reachable quorum, or the learner to promote has not caught up, or
    the change is already done or another one is in flight."""


class MetaWatchCompacted(MetaError):
    """A watch asked to resume after a cursor whose following events this replica no longer keeps
    (or never had: it was restored from a snapshot after it). Re-read the range (initial_flush)."""


# --- log service (engine/logservice) and RPC layer (engine/rpc) ---

class LogServiceError(LogtideError):
    """Base of the log service's errors."""


class InvalidRange(LogServiceError, ValueError):
    """A read asked for LSNs that are truncated or beyond the end of the log."""


class InvalidTruncateLsn(LogServiceError, ValueError):
    """truncate() was given an LSN not above the current truncated LSN (or beyond the end of the log)."""


class RecordTooLarge(LogServiceError, ValueError):
    """A record or request is bigger than the configured limit."""


class LogServiceClosed(LogServiceError):
    """The log service (or the client) is closed."""


class LogServiceFailed(LogServiceError):
    """A write or fsync failed; the service refuses further appends until it is reopened."""

    @classmethod
    def after(cls, cause: BaseException) -> "LogServiceFailed":
        """The error every later caller gets once the write that raised `cause` failed."""
        exc = cls(f"a log write failed ({cause!r}); reopen the log service")
        exc.__cause__ = cause
        return exc


class CorruptLogError(CorruptionError, LogServiceError):
    """A record in the middle of the log failed verification. Never skipped silently."""

    def __init__(self, message: str, segment: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.segment = segment
        self.offset = offset


class RpcError(LogtideError):
    """A remote call failed in transport (server unreachable, deadline, cancelled)."""


class InvalidRequest(LogtideError, ValueError):
    """The server could not decode a request (malformed message, unknown method arguments)."""


class MessageTooLarge(RpcError, RecordTooLarge):
    """A request or response is bigger than the transport's configured max message size."""


class RemoteError(RpcError):
    """The server failed with an error that has no logtide type (its type name is in the message)."""


class ConnectionRefused(RpcError):
    """Nothing listens at the address (the connection was refused): the peer's process is gone, or
    not started yet; unlike a silent peer, which a deadline ends."""


class TlsError(RpcError):
    """A TLS handshake failed: a certificate the other side's CA did not sign, a host name the
    server's certificate does not carry, or one side without TLS."""


class RpcStreamBroken(RpcError):
    """The connection (or stream) a call travelled on broke before its reply came; the next call reconnects."""


class WireProtocolError(InvalidRequest):
    """Bytes on a framed-carrier connection that break its format (docs/rpc.md, "The framed
    carrier"); the receiver closes that connection, saying why, and serves its other ones."""


class BadWireMagic(WireProtocolError):
    """A connection did not open with the framed carrier's magic and version."""


class FrameTooLarge(WireProtocolError):
    """A frame's length is over the receiver's limit (refused before its body is read), or zero."""


class FrameChecksumError(WireProtocolError):
    """A frame's body does not match its CRC-32C."""


class MalformedFrame(WireProtocolError):
    """A frame whose body does not parse for its kind, of an unknown kind, or cut short by the
    connection's end."""


class UnknownWireId(WireProtocolError):
    """A frame names a method index never bound on the connection, or a stream never opened."""


class FrameTimeout(WireProtocolError):
    """A frame was begun and not finished within the receiver's frame timeout."""


class ForkedProcessError(LogtideError, RuntimeError):
    """gRPC was used in a process forked from one that had already used gRPC, which gRPC does not
    support. Not retryable: fork before the first client or server, or start workers with 'spawn'."""


class CorruptRecordError(CorruptionError):
    """A WAL record (PostgreSQL XLogRecord layout) failed its length, header or CRC-32C checks."""


class CorruptWalPageError(CorruptionError):
    """A PostgreSQL WAL page or segment header is damaged (magic, address, continuation)."""


class LsnOrderError(LogtideError, ValueError):
    """An LSN went backwards where LSNs must be non-decreasing."""


class ReadOnlyError(LogtideError):
    """A write was attempted on a read-only (RO mode) LogIndex."""

class ReadOnlySnapshotError(ReadOnlyError, TypeError):
    """A write reached a read-only view (a BTree snapshot)."""


class LogtailError(LogtideError):
    """A logtail request (TN or CN) failed."""


class UnknownTableError(LogtailError, KeyError):
    """The table is not in the catalog."""


class SchemaError(LogtailError, TypeError):
    """Rows do not match the table's columns or types."""


class WriteConflictError(LogtailError):
    """Another transaction committed a write to the same primary key after this one began."""


class DuplicateKeyError(LogtailError, ValueError):
    """An insert names a primary key that already exists."""


class KeyNotFoundError(LogtailError, KeyError):
    """A delete or update names a primary key that does not exist."""


class MalformedMessageError(LogtailError, ValueError):
    """A logtail stream message or log record could not be decoded."""


class StreamClosedError(LogtailError):
    """The logtail stream between a CN and the TN is gone."""


# --- physical replication (replay/, _ext/page, _ext/redo) ---
class CorruptPageError(CorruptBlockError):
    """A data page failed its checksum or header check and no intact copy could repair it."""


class PageFullError(LogtideError):
    """A tuple does not fit in the free space of its page."""


class CorruptWALRecordError(CorruptionError):
    """A WAL record failed its CRC-32C or its lengths do not add up; it is never applied."""


class RedoError(LogtideError):
    """A WAL record cannot be applied to its page (wrong slot, no room): page and WAL disagree."""


class WalGoneError(LogtideError):
    """WAL needed for replay is no longer in the log (truncated) or was never written."""


class ReplicaError(LogtideError):
    """A read-only node cannot serve: it stopped on bad WAL, is not caught up, or was promoted."""


class GroupCommitFailed(LogtideError):
    """The group a write belonged to (or an earlier one) could not be made durable; the node must be reopened."""


class MetaStorageFailed(MetaError, GroupCommitFailed):
    """The meta-service's log could not make a write durable (a full or failing disk): writes are refused
    until the service is reopened; reads go on."""


class GroupCommitTimeout(LogtideError, TimeoutError):
    """A write was not made durable within its deadline (the group in flight is stuck)."""


# --- failures of peers: deadlines, liveness, truncation, directory ownership ---

class PeerTimeoutError(LogtideError, TimeoutError):
    """A wait on a peer (a remote call, a replica catching up, a watermark, a frame) passed its deadline."""


class DeadlineExceededError(RpcError, PeerTimeoutError):
    """A remote call got no answer within its deadline (the server is stopped, partitioned or overloaded).
    Whether a write was applied is unknown: read it back before retrying."""


class ReplicaTimeoutError(ReplicaError, PeerTimeoutError):
    """An RO node did not reach the LSN it waited for within the deadline."""


class ReplicaDroppedError(ReplicaError):
    """The primary dropped this RO node (it closed its link, or stopped reporting for longer than the
    replica timeout): it must re-sync from storage before it follows again."""


class TruncatedSubscribeError(ReplicaError, WalGoneError):
    """A subscribe asked to start at an LSN the primary has already truncated: refused, never served
    from a later LSN in silence. The node must re-sync from storage."""


class WatermarkTimeoutError(LogtailError, PeerTimeoutError):
    """A CN's table watermark did not reach the asked ts (or a subscribe got no answer) within the deadline."""


class MetaDeadlineExceeded(MetaUnavailableError, DeadlineExceededError):
    """A meta-service call got no answer within its deadline."""


class DirectoryInUseError(LogtideError):
    """Another open service (in this or another process) owns the directory; a second open is refused."""


class LogDirectoryInUse(DirectoryInUseError, LogServiceError):
    """The log directory is open in another LogService (this process or another)."""


class ClusterError(LogtideError):
    """A `logtide cluster` command could not do what it was asked."""


class ClusterRunningError(ClusterError):
    """`cluster up` on a directory whose cluster still has processes running."""


class ClusterStoppingError(ClusterError):
    """A process of a cluster that `cluster down` stopped (or is stopping) was asked to start:
    nothing was started."""


class ClusterLockTimeout(ClusterError):
    """D/cluster.lock stayed held by another writer of D/cluster.json past the deadline."""


class UnknownClusterProcess(ClusterError, ValueError):
    """A process named by ROLE#N that the cluster does not have (or a role it does not know)."""


# --- HAKeeper (engine/hakeeper) ---

class HAKeeperError(LogtideError):
    """Base of HAKeeper's errors. A command refused with one of these changed no HAKeeper state."""


class MalformedCommandError(HAKeeperError, InvalidArgument):
    """A HAKeeper command's bytes could not be decoded (bad magic, version, tag, length or field)."""


class MalformedHeartbeatError(MalformedCommandError):
    """A heartbeat (log store, TN, CN, primary, RO node) is malformed: bad bytes or impossible values."""


class UnknownStoreError(HAKeeperError, KeyError):
    """A heartbeat or schedule command names a store HAKeeper has not registered (or has dropped),
    or a store registered under another role. A dropped store registers again, then heartbeats."""


class UnknownReplicaError(HAKeeperError, KeyError):
    """A schedule command names a shard or replica that HAKeeper's state does not hold where the
    command needs it (not in the membership, not running on the store it names)."""


class CorruptHAKeeperSnapshot(HAKeeperError, CorruptionError):
    """A HAKeeper snapshot failed its magic, version, CRC or length checks; nothing was restored."""


class HAKeeperNotLeader(HAKeeperError):
    """A HAKeeper replica that is not the leader was asked to propose, or for a linearizable status.
    Nothing was proposed: send it again to the leader, whose address the message names after
    `leader at ` when this replica knows it (HAKeeperClient follows it)."""


class HAKeeperUnavailable(HAKeeperError, PeerTimeoutError):
    """No HAKeeper replica answered within the call's deadline, or the outcome of a proposal is
    unknown (it timed out after it was handed to Raft)."""
