"""The log service's on-disk facts, shared by the writer, the reader and recovery.

The frame itself is defined in _ext/wal.pxd; docs/wal_format.md writes the whole format out.
"""
from __future__ import annotations

import struct

from logtide._ext.wal import HEADER_SIZE  # 20: [u32 length][u32 crc32c][u64 lsn][u32 type]

# Record types (MatrixOne pb.RecordType).
USER_RECORD = 0
INTERNAL = 1
LEASE_UPDATE = 2
# logtide's own: the frames of the replay primary's WAL on a replicated log (replay/wal_frames.py),
# which its readers tell from the records of other writers sharing the log
WAL_FRAME_RECORD = 16

# Update types carried in the first 4 bytes of a record's data (MatrixOne pb.UpdateType).
USER_ENTRY_UPDATE = 2

# data = [u32 BE update type][u64 BE replica id][payload]
DATA_HEADER = struct.Struct(">IQ")
DATA_HEADER_SIZE = DATA_HEADER.size  # 12

SEGMENT_SUFFIX = ".log"
SEGMENT_NAME_DIGITS = 20  # a u64 LSN in decimal, zero-padded so names sort by LSN
DEFAULT_SEGMENT_SIZE = 64 << 20
DEFAULT_MAX_RECORD_SIZE = 16 << 20  # data bytes per record that an open takes for appends
# what recovery and readers take: any length the frame's u32 field holds, since an earlier open
# may have had a larger max_record_size (reading with the current one cut its records as torn)
MAX_FRAME_LENGTH = 0xFFFFFFFF
# the smallest message limit a server takes: every fixed-size reply must fit, and the largest,
# GetConfig's, carries the log's directory path (up to PATH_MAX, 4 KiB) besides the frame headers
MIN_MESSAGE_SIZE = 8 << 10

# The next segment, zero-filled ahead of use by the writer's pre-allocation thread, is prepared under
# this name and renamed to <first_lsn>.log when the writer rolls onto it. Not a segment: a copy left
# by a crash is deleted at open.
PREALLOC_FILE = "next-segment.prealloc"
PREFILL_MIN = 1 << 20   # bytes of zeros kept ahead of the write position, at least (and a new log's first file)
PREFILL_MAX = 8 << 20   # ... and at most: ahead = clamp(bytes already written, MIN, MAX)

STATE_FILE = "logservice.state"  # the state machine's snapshot (truncated LSN, TSO, readers)
LOCK_FILE = "LOCK"

FSYNC_MODES = ("always", "batch", "never")


def segment_name(first_lsn: int) -> str:
    return f"{first_lsn:0{SEGMENT_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first LSN a segment file name carries, or None for any other file."""
    stem = name[: -len(SEGMENT_SUFFIX)] if name.endswith(SEGMENT_SUFFIX) else ""
    if len(stem) != SEGMENT_NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)
