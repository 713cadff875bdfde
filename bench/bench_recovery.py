"""Crash recovery of a 1M-record log (issue 27), each path beside the old one on the same log.

- `Primary` crash recovery: open the directory after a crash (the log service opens and scans its
  segments, the LogIndex indexes every record, the log is redone page by page into the buffer pool,
  replay/page_redo.py), then one checkpoint writes every recovered page to the page store: pages
  on storage at the end, as the baseline leaves them.
- `replay_local`: the same log replayed by the pages plan in this process (spark/local_replay.py).
- the baseline: replay_local as it was before issue 27 (bench/pool_replay.py: replay_into_pool,
  pages pinned per chunk of records in LSN order).

The log is the Spark benchmark's shape (8 relations of 2,000 blocks, multi-page updates, full-page
images) and no checkpoint, so every record is redone. Figures: records/s and MB/s of WAL (the bytes
of the log's frames).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bench.conftest import SCALE, scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("Primary crash recovery of a 1M-record log (open + checkpoint) vs today's replay_local path "
          "(replay_into_pool), same log", "test_recovery_primary", "test_recovery_pool_replay", 4.0, 27),
    Ratio("replay_local (pages plan in one process, located per-page redo) vs today's replay_local path, same log",
          "test_recovery_replay_local", "test_recovery_pool_replay", None, 27),
]

ROUNDS = 2 if SCALE >= 1 else 1
POOL_PAGES = 32768        # the old replay_local's pool: every page of the log fits, on both sides
_seq = itertools.count()


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def crashed(work):
    """A primary's directory after a crash: the log of ~1M records, no checkpoint."""
    from logtide.spark.wal_workload import write_workload
    w = write_workload(work / "crashed", scaled(1_000_000, 10_000), seed=27, segment_size=8 << 20,
                       rels=tuple(range(16384, 16392)), blocks_per_rel=2000)
    from logtide.spark.log_segments import list_log_segments, scan_segment
    # the WAL's bytes: every frame (header and record) of every segment, not the files' preallocated size
    w.wal_bytes = 0
    for seg in list_log_segments(str(Path(w.data_dir) / "log")):
        s = scan_segment(seg)
        w.wal_bytes += int(s.lengths.sum()) + 20 * len(s.lengths)
    return w


def _figures(benchmark, w) -> None:
    best = benchmark.stats.stats.min
    benchmark.extra_info["figures"] = {"records_per_s": w.last_lsn / best, "wal_mb_per_s": w.wal_bytes / best / 1e6,
                                       "wal_mb": w.wal_bytes / 1e6}


@pytest.mark.benchmark(group="recovery")
def test_recovery_pool_replay(benchmark, items, crashed, work):
    from bench.pool_replay import replay_pool_local
    items(crashed.last_lsn)
    benchmark.pedantic(lambda: replay_pool_local(crashed.data_dir, crashed.last_lsn, work / f"old-{next(_seq)}",
                                                 pool_pages=POOL_PAGES), rounds=ROUNDS, iterations=1)
    _figures(benchmark, crashed)


@pytest.mark.benchmark(group="recovery")
def test_recovery_replay_local(benchmark, items, crashed, work):
    from logtide.spark.local_replay import replay_local
    items(crashed.last_lsn)
    benchmark.pedantic(lambda: replay_local(crashed.data_dir, crashed.last_lsn, work / f"local-{next(_seq)}"),
                       rounds=ROUNDS, iterations=1)
    _figures(benchmark, crashed)


@pytest.mark.benchmark(group="recovery")
def test_recovery_primary(benchmark, items, crashed, work):
    from logtide.replay.primary import Primary
    items(crashed.last_lsn)
    done = []

    dirs = []

    def setup():
        for old in dirs:                           # the previous round's copy, outside the timing
            shutil.rmtree(old, ignore_errors=True)
        d = work / f"primary-{next(_seq)}"
        shutil.copytree(crashed.data_dir, d)       # each round recovers the same crashed directory
        dirs.append(d)
        os.sync()   # the copy's writeback is set-up: a crashed primary's log is on disk already
        return (d,), {}

    def recover(d):
        p = Primary(d, pool_pages=POOL_PAGES, checkpoint_interval=0, start=False)
        try:
            p.checkpoint()         # every recovered page on storage, as the baseline's output is
            done.append((p.recovered_records, p.consistent_lsn))
        finally:
            p.crash()              # nothing more to flush: close() would checkpoint again
    benchmark.pedantic(recover, setup=setup, rounds=ROUNDS, iterations=1)
    assert done and all(d == (crashed.last_lsn, crashed.last_lsn) for d in done), done
    _figures(benchmark, crashed)
