"""The pages plan's exchange of scanned rows through files, so that each segment's WAL meta is
scanned once per job instead of once per partition.

Scan task t writes, for every owner p, the (tag, LSN, record location) rows of its segments that
p owns to `{t}-{p}.npy` in the job's refs directory (the five columns one after the other, each an
.npy array) and reports the row counts; redo task p reads `{t}-{p}.npy` of every scan task and
checks each count. The directory sits inside the job's temporary output directory on the shared
storage the segments are on, and is removed before the commit.

When the job's tasks all run at once (no more partitions than executor slots), one job does both:
redo task p scans range p, writes its files, and takes its peers' files as they appear
(`gather_refs`). A file is complete once it exists (written aside, then renamed). A peer whose file
has not appeared in time (not scheduled yet, or slow) is not waited for: the task scans that
range itself, so the job never depends on its tasks running side by side.
"""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from logtide.spark.errors import ReplayInputError
from logtide.spark.page_owner import owners

REFS_DIR = ".refs"
COLUMNS = 5                 # tags, lsn, seg, off, len


def refs_path(refs_dir: str, task: int, part: int) -> str:
    return os.path.join(refs_dir, f"{task}-{part}.npy")


def write_refs(refs_dir: str, task: int, rows: tuple, partitions: int) -> np.ndarray:
    """Split rows by owner and write one file per owner; returns int64[partitions] row counts."""
    own = owners(rows[0], partitions)
    order = np.argsort(own, kind="stable")
    counts = np.bincount(own, minlength=partitions).astype(np.int64)
    cuts = np.concatenate([[0], np.cumsum(counts)])
    cols = [a[order] for a in rows]
    for p in range(partitions):
        a, z = int(cuts[p]), int(cuts[p + 1])
        final = refs_path(refs_dir, task, p)
        tmp = f"{final}.{os.getpid()}.tmp"
        # written aside and renamed: a retried scan task never leaves a half file for a reader
        with open(tmp, "wb") as f:
            for c in cols:
                np.save(f, np.ascontiguousarray(c[a:z]), allow_pickle=False)
        os.replace(tmp, final)
    return counts


def _load(path: str, task: int, part: int) -> tuple:
    try:
        with open(path, "rb") as f:
            return tuple(np.load(f, allow_pickle=False) for _ in range(COLUMNS))
    except (OSError, ValueError, EOFError) as exc:
        raise ReplayInputError(f"scan task {task}'s rows for partition {part} cannot be read from {path}: "
                               f"{exc}") from None


POLL_S = 0.002


def gather_refs(refs_dir: str, part: int, partitions: int, tasks: int, scan: Callable[[int], tuple],
                wait_s: float) -> list[tuple]:
    """The rows of owner `part` (of `partitions`) from every scan range t in range(tasks) but its
    own: read from the file its peer task writes, or, if that has not appeared within wait_s
    seconds, from `scan(t)` (every owner's rows of range t), selected here."""
    out: dict[int, tuple] = {}
    waiting = [t for t in range(tasks) if t != part]
    deadline = time.monotonic() + wait_s
    while waiting:
        for t in [t for t in waiting if os.path.exists(refs_path(refs_dir, t, part))]:
            cols = _load(refs_path(refs_dir, t, part), t, part)
            if len({len(c) for c in cols}) != 1:
                raise ReplayInputError(f"scan task {t}'s file for partition {part} has columns of unequal length")
            out[t] = cols
            waiting.remove(t)
        if waiting and time.monotonic() >= deadline:
            for t in waiting:
                rows = scan(t)
                mine = owners(rows[0], partitions) == part
                out[t] = tuple(a[mine] for a in rows)
            break
        if waiting:
            time.sleep(POLL_S)
    return [out[t] for t in sorted(out)]


def read_refs(refs_dir: str, part: int, counts: dict[int, int]) -> list[tuple]:
    """The rows every scan task t wrote for owner `part`; counts[t] is the count t reported."""
    out = []
    for task, expected in sorted(counts.items()):
        path = refs_path(refs_dir, task, part)
        cols = _load(path, task, part)
        if any(len(c) != expected for c in cols):
            raise ReplayInputError(f"scan task {task} reported {expected} rows for partition {part} but "
                                   f"{path} holds {len(cols[1])}")
        out.append(cols)
    return out
