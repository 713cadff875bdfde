"""Single-process replay of a `logtide.replay` directory to a target LSN: the pages plan of
partitioned_replay run in this process, without Spark, as one partition that owns every page.

It is the fastest single-process path, so it is the baseline of the Spark speed-up: each page's
(LSN, record location) rows come from the LogIndex's saved tables or a Cython scan of the WAL meta
of the log segments (page_lsns.py), sorted by page then LSN, and the located per-page Cython redo
applies them straight from the mmap'ed segments, a chunk of pages at a time (redo_task.py). The
Spark replay must equal it byte for byte. Output layout and manifest as in page_output.py.
"""
from __future__ import annotations

import os
import time

from logtide.spark.log_segments import SegmentMaps
from logtide.spark.page_lsns import owned_rows
from logtide.spark.page_output import abort, commit, temp_dir_for
from logtide.spark.redo_task import PartitionReplayer, ReplayContext, joined_chunks
from logtide.spark.replay_input import analyze


def replay_local(data_dir, target_lsn: int, out_dir) -> dict:
    """Replay data_dir up to target_lsn in this process; commit a page store in out_dir.
    Returns {"records", "pages", "applied", "seconds", "manifest"}."""
    t0 = time.perf_counter()
    inp = analyze(data_dir, target_lsn)
    segs = inp.segments
    tmp = temp_dir_for(os.fspath(out_dir))
    ctx = ReplayContext(tuple(s.path for s in segs), inp.pages_dir, target_lsn, tmp, 1)
    first_needed = max(inp.consistent_lsn + 1, segs[0].first_lsn)
    rp = None
    maps = SegmentMaps()      # the scan faults every page in: the redo reads through the same maps
    try:
        rows = owned_rows(ctx, segs, inp.index_dir, first_needed, inp.base_tags(), 0, maps)
        rp = PartitionReplayer(ctx, maps)
        chunks = list(rp.chunks(*rows))
        rp.close()
        rp = None
        tags, lsns, crcs, applied = joined_chunks(chunks)
        manifest = commit(tmp, os.fspath(out_dir), tags, lsns, crcs, target_lsn=target_lsn, plan="local",
                          partitions=1)
    except BaseException:
        if rp is not None:
            rp.close()
        abort(tmp)
        raise
    finally:
        maps.close()
    # the records the replay covers, counted as partitioned_replay counts them
    records = max(0, target_lsn - segs[0].first_lsn + 1)
    return {"records": records, "pages": len(tags), "applied": applied, "seconds": time.perf_counter() - t0,
            "manifest": manifest}
