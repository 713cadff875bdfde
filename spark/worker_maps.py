"""The segment mmaps a pages-plan scan task leaves, in its Python worker, to a redo task of the same job.

Spark reuses a Python worker for later tasks (spark.python.worker.reuse, on by default), and a redo
task that runs where a scan task ran finds the segments that task scanned still mapped, their
pages faulted in: mapping a segment again would fault each page in again (0.46 s of system time
per task for a 5.7 GB log). A job's maps are keyed by its refs directory. Maps of another job are
closed when a task of a new job starts in the worker, so a worker holds one job's maps at most,
and a job that failed between its two stages leaves them only until the worker's next replay task.
"""
from __future__ import annotations

import threading

from logtide.spark.log_segments import SegmentMaps

_lock = threading.Lock()
_held: dict[str, SegmentMaps] = {}


def _drop_others(job: str) -> None:
    for key in [k for k in _held if k != job]:
        _held.pop(key).close()


def for_scan(job: str) -> SegmentMaps:
    """The maps a scan task of `job` maps its segments into (kept for the job's redo task)."""
    with _lock:
        _drop_others(job)
        maps = _held.get(job)
        if maps is None:
            maps = _held[job] = SegmentMaps()
        return maps


def take(job: str) -> SegmentMaps:
    """For a redo task of `job`: the maps its scan tasks left in this worker, or new ones; the
    caller owns them and closes them."""
    with _lock:
        _drop_others(job)
        maps = _held.pop(job, None)
    return maps if maps is not None else SegmentMaps()


def held() -> int:
    """How many jobs' maps this worker holds (0 or 1)."""
    with _lock:
        return len(_held)
