"""The log service: a durable, segmented, truncatable log with group commit and a TSO."""
from logtide.engine.logservice.client import LogServiceClient, LogServiceConfig, RecordBatch
from logtide.engine.logservice.log_format import INTERNAL, LEASE_UPDATE, USER_ENTRY_UPDATE, USER_RECORD
from logtide.engine.logservice.record import LogRecord
from logtide.engine.logservice.service import LogService

__all__ = ["INTERNAL", "LEASE_UPDATE", "LogRecord", "LogService", "LogServiceClient", "LogServiceConfig",
           "RecordBatch", "USER_ENTRY_UPDATE", "USER_RECORD", "connect_logservice"]


def connect_logservice(address: str, **options) -> LogServiceClient:
    """A client of the log service served at "host:port" (gRPC); same interface as LogService."""
    from logtide.engine.logservice.grpc_client import GrpcLogServiceClient
    return GrpcLogServiceClient(address, **options)
