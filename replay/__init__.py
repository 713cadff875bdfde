"""Physical replication: pages, buffer pool, primary, read-only nodes, lazy replay."""
from logtide.replay.primary import Primary, TupleNotFoundError
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess


def connect_replication(ro, address: str):
    """Subscribe RO node `ro` to the primary serving replication at `address` (the framed carrier)."""
    from logtide.replay.replication_rpc import connect_replication as _connect
    return _connect(ro, address)


__all__ = ["Primary", "ReadOnlyNode", "TupleNotFoundError", "connect_replication", "connect_inprocess"]
