"""The pages plan's exchange of scanned rows through files, so that each segment's WAL meta is
scanned once per job instead of once per partition.

Scan task t writes, for every owner p, the (tag, LSN, record location) rows of its segments that
p owns to `{t}-{p}.npy` in the job's refs directory (the five columns one after the other, each an
.npy array) and reports the row counts; redo task p reads `{t}-{p}.npy` of every scan task and
checks each count. The directory sits inside the job's temporary output directory on the shared
storage the segments are on, and is removed before the commit.
"""
from __future__ import annotations

import os

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


def read_refs(refs_dir: str, part: int, counts: dict[int, int]) -> list[tuple]:
    """The rows every scan task t wrote for owner `part`; counts[t] is the count t reported."""
    out = []
    for task, expected in sorted(counts.items()):
        path = refs_path(refs_dir, task, part)
        try:
            with open(path, "rb") as f:
                cols = tuple(np.load(f, allow_pickle=False) for _ in range(COLUMNS))
        except (OSError, ValueError, EOFError) as exc:
            raise ReplayInputError(f"scan task {task}'s rows for partition {part} cannot be read from {path}: "
                                   f"{exc}") from None
        if any(len(c) != expected for c in cols):
            raise ReplayInputError(f"scan task {task} reported {expected} rows for partition {part} but "
                                   f"{path} holds {len(cols[1])}")
        out.append(cols)
    return out
