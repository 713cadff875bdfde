"""The roles of the stores that heartbeat to HAKeeper."""
from __future__ import annotations

from enum import IntEnum


class StoreRole(IntEnum):
    LOG = 1       # a log-service store (it also hosts a HAKeeper replica)
    TN = 2        # a transaction node's store
    CN = 3        # a compute node
    PRIMARY = 4   # the replication primary (replay/)
    RO = 5        # a read-only node of the replication primary


ROLE_NAMES = {StoreRole.LOG: "log", StoreRole.TN: "tn", StoreRole.CN: "cn", StoreRole.PRIMARY: "primary",
              StoreRole.RO: "ro"}
