"""ClusterInfo, set once at bootstrap, and HAKeeper's bootstrap states."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from logtide.errors import MalformedCommandError


class BootstrapState(IntEnum):
    """Created → Bootstrapping (the cluster info is set) → Running (every log shard reported its
    replicas). The checkers run only in Running; nothing moves the state back."""
    CREATED = 0
    BOOTSTRAPPING = 1
    RUNNING = 2


@dataclass(frozen=True)
class ClusterInfo:
    """What the cluster should look like: shard and replica counts."""
    log_shards: int = 1            # data log shards, ids 1..log_shards (HAKeeper itself is shard 0)
    log_replicas: int = 3          # voters per log shard
    non_voting_replicas: int = 0   # non-voting replicas (learners that stay learners) per log shard
    tn_shards: int = 1             # TN shards, ids 1..tn_shards

    def __post_init__(self) -> None:
        for name in ("log_shards", "log_replicas", "non_voting_replicas", "tn_shards"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 255:
                raise MalformedCommandError(f"cluster info {name} must be an int in [0, 255], got {v!r}")
        if self.log_shards and self.log_replicas < 1:
            raise MalformedCommandError("cluster info: a log shard needs at least one replica")

    def log_shard_ids(self) -> range:
        return range(1, self.log_shards + 1)

    def tn_shard_ids(self) -> range:
        return range(1, self.tn_shards + 1)
