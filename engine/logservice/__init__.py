"""The log service: a durable, segmented, truncatable log with group commit and a TSO."""
from logtide.engine.logservice.client import LogServiceClient, LogServiceConfig, RecordBatch
from logtide.engine.logservice.log_format import INTERNAL, LEASE_UPDATE, USER_ENTRY_UPDATE, USER_RECORD
from logtide.engine.logservice.record import LogRecord
from logtide.engine.logservice.service import LogService

__all__ = ["INTERNAL", "LEASE_UPDATE", "LogRecord", "LogService", "LogServiceClient", "LogServiceConfig",
           "RecordBatch", "USER_ENTRY_UPDATE", "USER_RECORD", "connect_logservice"]


def connect_logservice(address: str, **options) -> LogServiceClient:
    """A client of the log service served at "host:port"; same interface as LogService. It speaks
    the framed carrier (docs/rpc.md); carrier="grpc" speaks gRPC to a server's gRPC port instead.
    Several replicas "h1:p1,h2:p2,h3:p3" (or replicated=True) connect to a replicated (Raft) log
    service and follow its leader."""
    replicated = options.pop("replicated", False)  # popped first: the single-node client takes no such option
    if "," in address or replicated:
        from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
        return ReplicatedLogServiceClient(address, **options)
    from logtide.engine.logservice.remote_client import RemoteLogServiceClient
    return RemoteLogServiceClient(address, **options)
