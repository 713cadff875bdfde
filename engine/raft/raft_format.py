"""The Raft log's on-disk facts, shared by DiskStorage's writer, reader and recovery.

The log is the log service's segment format (docs/wal_format.md): one frame per Raft index, the
frame's LSN is the index, and its type is RAFT_ENTRY. A frame's data is

    [u64 BE term][u8 entry type][entry data]

The hard state and the snapshot's metadata (index, term, membership) live together in one
state file, replaced atomically (write temp, fsync, rename, fsync the directory):

    "LTRAFT01" | JSON body | u32 LE body length | u32 LE crc32c(body)

The snapshot's state-machine image is its own file, snapshot-<index>.snap, with the same framing.
"""
from __future__ import annotations

import struct

RAFT_ENTRY = 0x52  # the frame type of a Raft entry ("R"); the log service's own types are 0..2
ENTRY_HEADER = struct.Struct(">QB")  # term, entry type
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # 9

LOG_DIR = "log"
STATE_FILE = "raft.state"
STATE_MAGIC = b"LTRAFT01"
SNAP_MAGIC = b"LTRSNP01"
TRAILER = struct.Struct("<II")  # body length, crc32c(body)


def snapshot_name(index: int) -> str:
    return f"snapshot-{index:020d}.snap"


def parse_snapshot_name(name: str) -> int | None:
    if name.startswith("snapshot-") and name.endswith(".snap") and name[9:-5].isdigit():
        return int(name[9:-5])
    return None
