"""WAL records as Arrow rows, one per block reference (shared by the `logtide.wal` source and
`pg_changed_pages`). A record without block references is one row with null page columns."""
from __future__ import annotations

import numpy as np

WAL_SCHEMA = ("lsn long, xid long, rmid int, info int, spc long, db long, rel long, fork int, block long, "
              "has_image boolean, record_len long")
PAGE_COLUMNS = ("spc", "db", "rel", "fork", "block")


def wal_batch(lsn, xid, rmid, info, tags, has_image, valid, record_len):
    """A pyarrow RecordBatch of the WAL schema from per-row numpy arrays (valid = has a page)."""
    import pyarrow as pa
    null = ~valid.astype(bool)
    cols = [pa.array(lsn.astype(np.int64)), pa.array(xid.astype(np.int64)), pa.array(rmid.astype(np.int32)),
            pa.array(info.astype(np.int32))]
    for j, name in enumerate(PAGE_COLUMNS):
        v = tags[:, j].astype(np.int32 if name == "fork" else np.int64)
        cols.append(pa.array(v, mask=null))
    cols.append(pa.array(has_image.astype(bool), mask=null))
    cols.append(pa.array(record_len.astype(np.int64)))
    names = ["lsn", "xid", "rmid", "info", *PAGE_COLUMNS, "has_image", "record_len"]
    return pa.RecordBatch.from_arrays(cols, names=names)


def pg_rows(b):
    """Per-row arrays of a PostgreSQL RecordBatch: one row per block ref, one for a record without."""
    nb = b.rec_nblocks.astype(np.int64)
    cnt = np.maximum(nb, 1)
    rec = np.repeat(np.arange(len(nb)), cnt)
    pos = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    valid = pos < nb[rec]
    row = np.where(valid, b.rec_first[rec] + pos, 0)
    if len(b.tags):
        tags = b.tags[row]
        img = (b.fork_flags[row] & 0x10) != 0
    else:
        tags = np.zeros((len(rec), 5), np.uint32)
        img = np.zeros(len(rec), bool)
    return dict(lsn=b.rec_lsn[rec], xid=b.rec_xid[rec], rmid=b.rec_rmid[rec], info=b.rec_info[rec], tags=tags,
                has_image=img & valid, valid=valid, record_len=b.rec_tot_len[rec])
