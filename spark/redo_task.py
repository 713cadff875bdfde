"""The executor side of partitioned replay: apply a partition's (tag, lsn, record location) rows.

Rows come sorted by page then LSN, so each page's records are one run. A chunk of whole pages is
loaded from the page store (or starts all-zero), the records are applied by the Cython redo
straight from the mmap'ed log segments (only to the page of the row: the per-page redo filter),
and the pages are written into the job's temporary directory. The rows come from scans that
checked each record's CRC-32C with its frame's, in one pass (log_segments.scan_segment,
records=True), so the redo does not sum a record again. Python work is per page and per chunk, never per
record.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from logtide._ext import page as pg
from logtide._ext import redo
from logtide._ext.located_redo import apply_located
from logtide.errors import RedoError
from logtide.spark.errors import ReplayInputError, SegmentCorruptError
from logtide.spark.log_segments import SegmentMaps
from logtide.spark.page_output import PAGE_SIZE, PageWriter

CHUNK_PAGES = 2048          # pages held at once by a task: 16 MiB
PAGE_SCHEMA = "spc long, db long, rel long, fork long, block long, page_lsn long, crc long, applied long"


@dataclass(frozen=True)
class ReplayContext:
    """What every task of one job needs (pickled into the tasks)."""
    segment_paths: tuple[str, ...]     # by segment index
    pages_dir: str
    target_lsn: int
    tmp_dir: str | None                # None: emit the pages as rows instead of writing them
    partitions: int


class PageChunk(NamedTuple):
    """The pages of one chunk a task wrote: their tags, page LSNs, CRC-32Cs and applied records."""
    tags: np.ndarray          # (m, 5) uint32
    page_lsns: np.ndarray     # uint64
    crcs: np.ndarray          # uint32
    applied: np.ndarray       # int64


def joined_chunks(chunks) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(tags (n, 5) uint32, page LSNs int64, CRC-32Cs uint32, applied records) of all chunks."""
    if not chunks:
        return np.empty((0, 5), np.uint32), np.empty(0, np.int64), np.empty(0, np.uint32), 0
    return (np.concatenate([c.tags for c in chunks]).astype(np.uint32),
            np.concatenate([c.page_lsns for c in chunks]).astype(np.int64),
            np.concatenate([c.crcs for c in chunks]).astype(np.uint32),
            int(sum(int(c.applied.sum()) for c in chunks)))


def _page_batch(tags, lsns, crcs, applied):
    import pyarrow as pa
    t = tags.astype(np.int64)
    cols = [pa.array(t[:, j]) for j in range(5)]
    cols += [pa.array(lsns.astype(np.int64)), pa.array(crcs.astype(np.int64)), pa.array(applied.astype(np.int64))]
    return pa.RecordBatch.from_arrays(cols, names=["spc", "db", "rel", "fork", "block", "page_lsn", "crc",
                                                   "applied"])


PAGES_ROW_SCHEMA = "spc long, db long, rel long, fork int, block long, page_lsn long, page binary"


def page_rows_batch(tags, lsns, pages):
    """Pages as rows of PAGES_ROW_SCHEMA; the page column shares the pages' buffer (one copy)."""
    import pyarrow as pa
    m = len(tags)
    t = tags.astype(np.int64)
    offsets = pa.py_buffer((np.arange(m + 1, dtype=np.int32) * PAGE_SIZE).tobytes())
    data = pa.py_buffer(np.ascontiguousarray(pages[:m]).tobytes())
    col = pa.Array.from_buffers(pa.binary(), m, [None, offsets, data])
    cols = [pa.array(t[:, 0]), pa.array(t[:, 1]), pa.array(t[:, 2]), pa.array(t[:, 3].astype(np.int32)),
            pa.array(t[:, 4]), pa.array(lsns.astype(np.int64)), col]
    return pa.RecordBatch.from_arrays(cols, names=["spc", "db", "rel", "fork", "block", "page_lsn", "page"])


class PartitionReplayer:
    """Replays the pages of one partition, chunk by chunk (rows sorted by tag, then LSN)."""

    def __init__(self, ctx: ReplayContext, maps: SegmentMaps | None = None):
        """maps: the segments' mmaps, shared with a scan in this process (the caller closes them);
        else the replayer maps each segment it reads and closes them in close()."""
        from logtide.replay.page_store import PageStore
        self.ctx = ctx
        self.store = PageStore(ctx.pages_dir) if os.path.isdir(ctx.pages_dir) else None
        self.writer = PageWriter(ctx.tmp_dir) if ctx.tmp_dir is not None else None
        self._own_maps = maps is None
        self._maps = SegmentMaps() if maps is None else maps
        self.pages = np.empty((CHUNK_PAGES, PAGE_SIZE), np.uint8)

    def _buffer(self, seg: int):
        return self._maps.get(self.ctx.segment_paths[seg])

    def chunks(self, tags: np.ndarray, lsn: np.ndarray, seg: np.ndarray, off: np.ndarray, ln: np.ndarray):
        """Replay rows holding whole pages and write them (the context has a tmp_dir); yields one
        PageChunk per chunk of pages."""
        if self.writer is None:
            raise ValueError("chunks() writes pages: the ReplayContext needs a tmp_dir")
        for ptags, pages, applied in self._replayed(tags, lsn, seg, off, ln):
            crcs = self.writer.write(ptags, pages)
            yield PageChunk(ptags, pg.lsn_many(pages), crcs, applied)

    def apply(self, tags: np.ndarray, lsn: np.ndarray, seg: np.ndarray, off: np.ndarray, ln: np.ndarray):
        """Replay rows holding whole pages; yields one Arrow batch per chunk: PAGE_SCHEMA rows of
        the written pages, or with no tmp_dir the pages themselves as PAGES_ROW_SCHEMA rows."""
        if self.writer is not None:
            for c in self.chunks(tags, lsn, seg, off, ln):
                yield _page_batch(c.tags, c.page_lsns, c.crcs, c.applied)
            return
        for ptags, pages, _ in self._replayed(tags, lsn, seg, off, ln):
            pg.set_checksum_many(pages, np.ascontiguousarray(ptags[:, 4]))
            yield page_rows_batch(ptags, pg.lsn_many(pages), pages)

    def _replayed(self, tags, lsn, seg, off, ln):
        """(page tags, pages, applied counts) of each chunk of whole pages, replayed in place."""
        n = len(lsn)
        if not n:
            return
        new = np.ones(n, bool)
        new[1:] = np.any(tags[1:] != tags[:-1], axis=1)
        starts = np.nonzero(new)[0]
        for c in range(0, len(starts), CHUNK_PAGES):
            a = int(starts[c])
            z = int(starts[c + CHUNK_PAGES]) if c + CHUNK_PAGES < len(starts) else n
            yield self._chunk(tags[a:z], lsn[a:z], seg[a:z], off[a:z], ln[a:z], new[a:z])

    def _chunk(self, tags, lsn, seg, off, ln, new):
        rows = np.cumsum(new) - 1
        ptags = np.ascontiguousarray(tags[new])
        m = len(ptags)
        pages = self.pages[:m]
        for i, t in enumerate(ptags.tolist()):         # one read per page
            if self.store is not None:
                self.store.read_into(t, pages[i])
            else:
                pages[i] = 0
        base = pg.lsn_many(pages)
        over = np.nonzero(base > self.ctx.target_lsn)[0]
        if len(over):
            t = tuple(ptags[over[0]].tolist())
            raise ReplayInputError(f"target LSN {self.ctx.target_lsn} is below the LSN {int(base[over[0]])} of "
                                   f"page {t} in the page store: the store is past the target")
        todo = seg >= 0                                  # seg -1 marks a stored page with no record
        applied = np.zeros(m, np.int64)
        if todo.any():
            segs = seg[todo]
            used = np.unique(segs)
            local = np.searchsorted(used, segs).astype(np.int32)
            bufs = [self._buffer(int(s)) for s in used]
            res, _, bad = apply_located(pages, rows[todo].astype(np.int64), np.ascontiguousarray(tags[todo]),
                                        bufs, local, off[todo].astype(np.int64), ln[todo].astype(np.int64),
                                        lsn[todo].astype(np.uint64), np.zeros(len(segs), np.uint8))
            if bad >= 0:
                self._fail(int(res[bad]), int(lsn[todo][bad]), int(segs[bad]), tuple(tags[todo][bad].tolist()))
            np.add.at(applied, rows[todo], (res == redo.APPLIED).astype(np.int64))
        return ptags, pages, applied

    def _fail(self, code: int, lsn: int, seg: int, tag: tuple) -> None:
        name = os.path.basename(self.ctx.segment_paths[seg])
        try:
            redo.raise_for(code, lsn)
        except RedoError as exc:
            raise RedoError(f"log segment {name}: page {tag}: {exc}") from None
        except Exception as exc:
            raise SegmentCorruptError(f"log segment {name}: WAL record at LSN {lsn}: {exc}") from None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.store is not None:
            self.store.close()
        if self._own_maps:
            self._maps.close()
