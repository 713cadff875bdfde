"""What a partitioned replay reads, checked on the driver before any task runs.

The shared directory of `logtide.replay`: `log/` (segments), `pages/` (the page store as of the
last checkpoint), `logindex/` and the control file. Pages at the target LSN are the stored pages
plus every log record up to the target that is newer than the stored page (redo is idempotent by
page LSN), so the log must hold everything after the checkpoint's consistent LSN and reach the
target.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from logtide.replay.control_file import read_control
from logtide.spark.errors import ReplayInputError, SegmentMissingError
from logtide.spark.log_segments import LogSegment, list_log_segments, scan_segment

PAGES_DIR, LOG_DIR, INDEX_DIR = "pages", "log", "logindex"


@dataclass
class ReplayInput:
    data_dir: str
    target_lsn: int
    segments: list[LogSegment]          # the segments holding LSNs up to the target
    end_lsn: int                        # the log's last LSN
    consistent_lsn: int
    relations: list[tuple[tuple[int, int, int, int], int]] = field(default_factory=list)  # base pages

    @property
    def pages_dir(self) -> str:
        return os.path.join(self.data_dir, PAGES_DIR)

    @property
    def index_dir(self) -> str:
        return os.path.join(self.data_dir, INDEX_DIR)

    def base_tags(self) -> np.ndarray:
        """(n, 5) uint32 tags of every page in the page store."""
        parts = []
        for (spc, db, rel, fork), nblocks in self.relations:
            t = np.empty((nblocks, 5), np.uint32)
            t[:, :4] = (spc, db, rel, fork)
            t[:, 4] = np.arange(nblocks, dtype=np.uint32)
            parts.append(t)
        return np.concatenate(parts) if parts else np.empty((0, 5), np.uint32)


def store_relations(pages_dir: str) -> list[tuple[tuple[int, int, int, int], int]]:
    """((spc, db, rel, fork), nblocks) of each relation fork file of a page store."""
    out = []
    if not os.path.isdir(pages_dir):
        return out
    for name in sorted(os.listdir(pages_dir)):
        parts = name.split("_")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            out.append((tuple(int(p) for p in parts), os.path.getsize(os.path.join(pages_dir, name)) // 8192))
    return out


def analyze(data_dir: str, target_lsn: int) -> ReplayInput:
    """Check the directory against the target LSN; raise ReplayInputError/SegmentMissingError."""
    data_dir = os.fspath(data_dir)
    if not isinstance(target_lsn, int) or isinstance(target_lsn, bool) or target_lsn < 1:    # True was LSN 1
        raise ReplayInputError(f"target LSN must be a positive int, got {target_lsn!r}")
    segs = list_log_segments(os.path.join(data_dir, LOG_DIR))
    ctl = read_control(data_dir)
    if segs[0].first_lsn > ctl.consistent_lsn + 1:
        raise SegmentMissingError(
            f"the log starts at LSN {segs[0].first_lsn} (segment {segs[0].name}) but the page store is consistent "
            f"only up to LSN {ctl.consistent_lsn}: LSNs {ctl.consistent_lsn + 1}..{segs[0].first_lsn - 1} are gone")
    last = scan_segment(segs[-1], verify=False)
    end = last.last_lsn
    if target_lsn > end:
        raise ReplayInputError(f"target LSN {target_lsn} is beyond the end of the log: its last LSN is {end} "
                               f"(segment {segs[-1].name})")
    need = [s for s in segs if s.first_lsn <= target_lsn]
    return ReplayInput(data_dir, target_lsn, need, end, ctl.consistent_lsn,
                       store_relations(os.path.join(data_dir, PAGES_DIR)))
