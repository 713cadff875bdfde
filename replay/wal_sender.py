"""The WAL-meta sender: turns the primary's meta queue into stream messages for one RO node.

It starts at the RO node's start LSN. Entries still in the meta queue are sent from memory;
older ones (a node that subscribed late or fell behind) are rebuilt from the log: read the full
record, keep its meta. When there is nothing to send it sends a heartbeat (an empty batch) so the
node still learns the write and consistent LSNs.
"""
from __future__ import annotations

import threading
from typing import Iterator

from logtide._ext import xlogwriter as xw
from logtide.replay.meta_stream import encode_batch

BATCH_RECORDS = 1024
HEARTBEAT_S = 0.05


def meta_frames(primary, start_lsn: int, stop: threading.Event, batch: int = BATCH_RECORDS,
                heartbeat: float = HEARTBEAT_S) -> Iterator[bytes]:
    """Stream messages for LSNs >= start_lsn until `stop` is set."""
    pos = start_lsn
    while not stop.is_set() and not primary.stopped:
        first = primary.queue.first_lsn()
        if pos <= primary.write_lsn and (first == 0 or pos < first):
            end = primary.write_lsn if first == 0 else min(primary.write_lsn, first - 1)
            recs = primary.wal.read(pos, 1 << 20)
            recs = [(l, r) for l, r in recs if l <= end][:batch]
            lsns = [l for l, _ in recs]
            metas = [xw.wal_meta(r) for _, r in recs]
        else:
            got = primary.queue.read(pos, batch, heartbeat)
            if got is None:
                continue  # trimmed meanwhile: the next round reads the log
            lsns, metas = got
        yield encode_batch(lsns, metas, primary.write_lsn, primary.consistent_lsn)
        if lsns:
            pos = lsns[-1] + 1
