"""The baseline of the recovery benchmark: replay_local as it was before issue 27 (logtide.replay's
recovery path of that time), kept here unchanged so that the new path is measured against it on the
same log: full WAL records in LSN order, block references from the Cython meta decoder,
`replay_into_pool` into a BufferPool whose evictions write pages out (Python callbacks per page per
chunk of 64K records). Output layout and manifest as in logtide.spark.page_output.
"""
from __future__ import annotations

import os
import time

import numpy as np

from logtide._ext import page as pg
from logtide.replay.batch_replay import block_refs, replay_into_pool
from logtide.replay.buffer_pool import BufferPool
from logtide.spark.log_segments import WAL_DATA_OFFSET, scan_segment
from logtide.spark.page_output import PageWriter, abort, commit, temp_dir_for
from logtide.spark.replay_input import analyze

BATCH_RECORDS = 65536


def replay_pool_local(data_dir, target_lsn: int, out_dir, *, pool_pages: int = 32768) -> dict:
    """Replay data_dir up to target_lsn in this process the pre-issue-27 way; commit a page store in out_dir.
    Returns {"records", "pages", "seconds", "manifest"}. The pool is large (256 MiB of frames, touched
    only as used) so that replay_into_pool works in big chunks: the fastest this path goes."""
    from logtide.replay.page_store import PageStore
    t0 = time.perf_counter()
    inp = analyze(data_dir, target_lsn)
    tmp = temp_dir_for(os.fspath(out_dir))
    store = PageStore(inp.pages_dir) if os.path.isdir(inp.pages_dir) else None
    writer = PageWriter(tmp)
    written: dict[tuple, tuple[int, int]] = {}

    def out(tag, page) -> bool:
        p = np.array(page, dtype=np.uint8).reshape(1, -1)
        crc = writer.write(np.array([tag], np.uint32), p)
        written[tuple(tag)] = (pg.get_lsn(p[0]), int(crc[0]))
        return True

    def load(tag, frame) -> None:
        if store is not None:
            store.read_into(tag, frame)
        else:
            frame[:] = 0

    pool = BufferPool(pool_pages, evict_dirty=out)
    records = 0
    try:
        base = inp.base_tags()
        if len(base):     # stored pages first; replayed pages overwrite them
            page = np.empty(8192, np.uint8)
            for t in base.tolist():
                load(tuple(t), page)
                out(tuple(t), page)
        for seg in inp.segments:
            s = scan_segment(seg)
            n = min(len(s.starts), target_lsn - seg.first_lsn + 1)
            user = np.nonzero(s.types[:n] == 0)[0]
            if not len(user):
                continue
            # the records back to back: drop each frame's header and data prefix in one masked copy
            first = s.starts[user].astype(np.int64) + WAL_DATA_OFFSET
            end = s.starts[user].astype(np.int64) + 20 + s.lengths[user].astype(np.int64)
            mv = np.frombuffer(s.buf, np.uint8)
            edge = np.zeros(len(mv) + 1, np.int8)
            edge[first] += 1
            edge[end] -= 1
            blob_all = mv[np.cumsum(edge[:-1], dtype=np.int8).view(bool)]   # ranges never overlap: 0 or 1
            offs_all = np.zeros(len(user) + 1, np.int64)
            np.cumsum(end - first, out=offs_all[1:])
            lsns_all = np.uint64(seg.first_lsn) + user.astype(np.uint64)
            for a in range(0, len(user), BATCH_RECORDS):
                z = min(len(user), a + BATCH_RECORDS)
                blob = blob_all[offs_all[a]:offs_all[z]]
                offs = offs_all[a:z + 1] - offs_all[a]
                lsns = lsns_all[a:z]
                tags, rec = block_refs(blob, offs)
                replay_into_pool(pool, load, blob, offs, lsns, tags, rec)
                records += z - a
        for tag, f in pool.resident():
            out(tag, pool.frames[f])
        tags = np.array(sorted(written), np.uint32).reshape(-1, 5)
        vals = np.array([written[tuple(t)] for t in tags.tolist()], np.int64).reshape(-1, 2)
        writer.close()
        manifest = commit(tmp, os.fspath(out_dir), tags, vals[:, 0], vals[:, 1].astype(np.uint32),
                          target_lsn=target_lsn, plan="local", partitions=1)
    except BaseException:
        writer.close()
        abort(tmp)
        raise
    finally:
        if store is not None:
            store.close()
    return {"records": records, "pages": len(tags), "seconds": time.perf_counter() - t0, "manifest": manifest}

