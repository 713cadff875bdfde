"""Physical replication: pages, buffer pool, primary, read-only nodes, lazy replay."""
from logtide.replay.primary import Primary, TupleNotFoundError
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess


def connect_grpc(ro, address: str):
    """Subscribe RO node `ro` to the primary serving replication at `address` (gRPC)."""
    from logtide.replay.transport_grpc import connect_grpc as _connect
    return _connect(ro, address)


__all__ = ["Primary", "ReadOnlyNode", "TupleNotFoundError", "connect_grpc", "connect_inprocess"]
