"""The marker a log store leaves in a replica's directory when HAKeeper had that replica killed as a zombie.

A killed zombie's data stays in place, and the store's command line still names its directory: a
restarted store would open it again and HAKeeper would have to kill it again. The marker, made
durable before the replica is closed, tells the restarted store not to open it (it starts with no
replica, as a spare). Replica ids are never handed out twice, so a marked directory is never
wanted again.
"""
from __future__ import annotations

import os

from logtide._ext.durable_io import replace_file_durably

MARKER = "ZOMBIE_KILLED"


def mark_killed(replica_dir: str, replica_id: int) -> None:
    """Record durably that replica `replica_id` in `replica_dir` was killed as a zombie."""
    path = os.path.join(replica_dir, MARKER)
    replace_file_durably(path + ".tmp", path, f"{replica_id}\n".encode())


def killed(replica_dir: str) -> bool:
    """Whether the replica in `replica_dir` was killed as a zombie."""
    return os.path.exists(os.path.join(replica_dir, MARKER))
