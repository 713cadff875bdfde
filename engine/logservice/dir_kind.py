"""What a directory holds: a single-node log, a replicated log's replica, or neither.

A command handed a directory of the other kind must refuse it rather than start an empty log
beside the records it holds (a single-node log served with --raft showed none of its records).
"""
from __future__ import annotations

import os

from logtide.engine.logservice.log_format import STATE_FILE
from logtide.engine.logservice.recovery import list_segments
from logtide.errors import InvalidArgument

RAFT_SUBDIR = "raft"   # a replica keeps its Raft log here (ReplicatedLogService)


def holds_single_node_log(path: str) -> bool:
    """Segment files or the state snapshot of a single-node LogService."""
    return os.path.isdir(path) and (bool(list_segments(path)) or os.path.exists(os.path.join(path, STATE_FILE)))


def holds_replica(path: str) -> bool:
    """The Raft log of a replicated log service's replica."""
    return os.path.isdir(os.path.join(path, RAFT_SUBDIR))


def check_single_node_dir(path: str, must_exist: bool) -> None:
    """InvalidArgument unless `path` holds a single-node log (or, unless must_exist, is new or empty of
    any log): the one place the commands tell the two kinds apart."""
    if holds_replica(path):
        raise InvalidArgument(f"{path} holds a replicated log's replica: serve it with --raft, read it with "
                              f"`logtide logservice status`")
    if must_exist and not holds_single_node_log(path):
        raise InvalidArgument(f"{path} holds no log service (no such directory, or no segment files)")


def check_replica_dir(path: str) -> None:
    """InvalidArgument when `path` holds a single-node log (a replica would start empty beside it)."""
    if holds_single_node_log(path):
        raise InvalidArgument(f"{path} holds a single-node log service: a Raft replica would start empty "
                              f"beside its records; give --raft a directory of its own")
