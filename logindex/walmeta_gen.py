"""Generated WAL-meta streams: XLogRecords (PostgreSQL 15 layout) in their WAL-meta form.

Used by the demo and the benchmarks. Each record is one heap-like change of one page: the
24-byte header, a block header with its RelFileNode and block number, a short main-data
header and 3 bytes of main data; the block data itself is left out (WAL meta), though
xl_tot_len counts it as the full record would.
"""
from __future__ import annotations

import numpy as np

BLOCK_DATA = 40   # bytes of block data the full record would carry
MAIN_DATA = 3

_REC = np.dtype([("tot_len", "<u4"), ("xid", "<u4"), ("prev", "<u8"), ("info", "u1"), ("rmid", "u1"),
                 ("pad", "<u2"), ("crc", "<u4"),
                 ("block_id", "u1"), ("fork_flags", "u1"), ("data_len", "<u2"),
                 ("spc", "<u4"), ("db", "<u4"), ("rel", "<u4"), ("blkno", "<u4"),
                 ("main_id", "u1"), ("main_len", "u1"), ("main", "u1", (MAIN_DATA,))])
META_SIZE = _REC.itemsize   # 49 bytes
FULL_SIZE = META_SIZE + BLOCK_DATA


def workload_tags(n: int, seed: int = 0) -> np.ndarray:
    """PageTags shaped like an OLTP workload: 60% appends to a growing heap, 30% random updates over
    16 relations, 10% a few hot pages."""
    rng = np.random.default_rng(seed)
    tags = np.zeros((n, 5), np.uint32)
    tags[:, 0], tags[:, 1] = 1663, 5
    kind = rng.random(n)
    app = kind < 0.6
    rnd = (kind >= 0.6) & (kind < 0.9)
    hot = kind >= 0.9
    tags[app, 2] = 16400
    tags[app, 4] = np.arange(n, dtype=np.uint64)[app] // 60
    tags[rnd, 2] = 16384 + rng.integers(0, 16, int(rnd.sum()))
    tags[rnd, 4] = rng.integers(0, 1 << 16, int(rnd.sum()))
    tags[hot, 2] = 16390
    tags[hot, 4] = rng.integers(0, 10, int(hot.sum()))
    return tags


def wal_meta_stream(tags: np.ndarray, first_lsn: int = 1 << 24, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """(buffer of back-to-back WAL-meta records, the LSN of each record) for one record per tag row.

    LSNs advance by the full record size, as PostgreSQL's would (8-byte aligned).
    """
    n = len(tags)
    rec = np.zeros(n, _REC)
    step = (FULL_SIZE + 7) & ~7
    lsns = first_lsn + np.arange(n, dtype=np.uint64) * step
    rec["tot_len"] = FULL_SIZE
    rec["xid"] = 700 + np.arange(n, dtype=np.uint32) // 3
    rec["prev"] = lsns - step
    rec["info"] = 0x00            # XLOG_HEAP_INSERT
    rec["rmid"] = 10              # RM_HEAP_ID
    rec["block_id"] = 0
    rec["fork_flags"] = (tags[:, 3] & 0x0F) | 0x20   # HAS_DATA
    rec["data_len"] = BLOCK_DATA
    rec["spc"], rec["db"], rec["rel"], rec["blkno"] = tags[:, 0], tags[:, 1], tags[:, 2], tags[:, 4]
    rec["main_id"] = 255          # XLR_BLOCK_ID_DATA_SHORT
    rec["main_len"] = MAIN_DATA
    rec["main"] = np.random.default_rng(seed).integers(0, 256, (n, MAIN_DATA))
    return rec.tobytes(), lsns
