"""Node information: each replica's address and role, kept in the meta state machine apart from
Raft membership (the Databend seed's `Cmd::AddNode` / `Cmd::RemoveNode`).

Raft membership says who votes; these records say where a member serves and what it is, and they
go through the log like any command, so every replica holds the same ones and snapshots keep them.
They take no seq and raise no watch event: they are not keys.
"""
from __future__ import annotations

from dataclasses import dataclass

from logtide.engine.meta.match_seq import check_u64
from logtide.errors import MetaInvalidArgument

ROLE_VOTER = "voter"
ROLE_LEARNER = "learner"
ROLES = (ROLE_VOTER, ROLE_LEARNER)
MAX_ADDRESS_BYTES = 1024


def check_node_id(node_id) -> int:
    if isinstance(node_id, bool) or not isinstance(node_id, int) or node_id <= 0:
        raise MetaInvalidArgument(f"a node id is an int > 0, got {node_id!r}")
    return check_u64("node_id", node_id)


def check_address(address) -> str:
    """HOST:PORT, with a port number."""
    if not isinstance(address, str) or ":" not in address:
        raise MetaInvalidArgument(f"a node address is 'HOST:PORT', got {address!r}")
    host, port = address.rsplit(":", 1)
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or len(address.encode()) > MAX_ADDRESS_BYTES:
        raise MetaInvalidArgument(f"a node address is 'HOST:PORT', got {address!r}")
    return address


@dataclass(frozen=True)
class NodeInfo:
    """Where a member serves (its client and peer address) and its role."""
    node_id: int
    address: str
    role: str

    def __post_init__(self):
        check_node_id(self.node_id)
        check_address(self.address)
        if self.role not in ROLES:
            raise MetaInvalidArgument(f"a node role is one of {ROLES}, got {self.role!r}")


@dataclass(frozen=True)
class AddNodeCmd:
    """Record `node` (overriding=False leaves an existing record of that id as it is)."""
    node: NodeInfo
    overriding: bool = True

    def __post_init__(self):
        if not isinstance(self.node, NodeInfo):
            raise MetaInvalidArgument(f"AddNode takes a NodeInfo, got {self.node!r}")
        if not isinstance(self.overriding, bool):
            raise MetaInvalidArgument("overriding must be a bool")


@dataclass(frozen=True)
class RemoveNodeCmd:
    """Drop the record of node `node_id` (none: nothing changes)."""
    node_id: int

    def __post_init__(self):
        check_node_id(self.node_id)
