"""WalLog: logtide's WAL on the log service. Each WAL record is the payload of one user record,
and the log-service LSN is the WAL LSN."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from logtide.errors import InvalidRange, WalGoneError

DATA_PREFIX = 12  # u32 BE update type + u64 BE replica id, before every user record's payload


@dataclass
class WalRefs:
    """The block references of a run of WAL records, located in the buffers the log read them into
    (no object per record): reference i is page tags[i] of the record at
    bufs[buf_id[i]][rec_off[i]:rec_off[i] + rec_len[i]], LSN lsn[i]."""
    bufs: list
    buf_id: np.ndarray     # i32
    tags: np.ndarray       # (n, 5) u32
    lsn: np.ndarray        # u64, non-decreasing
    rec_off: np.ndarray    # i64
    rec_len: np.ndarray    # u32
    max_xid: int           # the largest xid of any record of the run (-1: none)
    next_lsn: int          # the LSN after the run


def _batch_refs(b) -> dict:
    """Block references (with their buffer and the largest xid) of one RecordBatch of log frames."""
    from logtide._ext import wal
    from logtide._ext.segment_refs import segment_refs
    starts = np.ascontiguousarray(b.offsets - np.uint64(wal.HEADER_SIZE), np.uint64)
    # the log checked each frame's CRC-32C, which covers the whole record, as it read the batch (or,
    # for a mapped batch, as it opened the segment): the record's own CRC would be another pass
    cols, bad, code = segment_refs(b.buf, starts, np.ascontiguousarray(b.types, np.uint32),
                                   np.ascontiguousarray(b.lengths, np.uint32), b.first_lsn, 2**64 - 1, False, True)
    if bad >= 0:
        from logtide._ext.xlogreader import xl_error_text
        from logtide.errors import CorruptWALRecordError
        what = "frame too short for a record" if code == -2 else xl_error_text(code)
        raise CorruptWALRecordError(f"WAL record at LSN {b.first_lsn + bad}: {what}")
    v = cols["valid"] == 1   # rows of records without blocks carry only their xid
    return {"buf": b.buf, "tags": cols["tags"][v], "lsn": cols["lsn"][v], "rec_off": cols["rec_off"][v],
            "rec_len": cols["rec_len"][v], "max_xid": int(cols["xid"].max()) if len(cols["xid"]) else -1}


class WalLog:
    """Append and read WAL records through any LogServiceClient (embedded, remote or replicated:
    a replicated log client is read through a FramedWal, see wal_frames.py)."""

    def __init__(self, service, replica_id: int = 0):
        from logtide.replay.wal_frames import FramedWal, needs_frames
        if needs_frames(service):
            service = FramedWal(service, writer=False, replica_id=replica_id)
        self.service = service
        self.replica_id = replica_id
        self._frames = service if isinstance(service, FramedWal) else None

    def append(self, record: bytes) -> int:
        """Append one WAL record, durable on return; its LSN."""
        return self.service.append(record, self.replica_id)

    def append_many(self, records: Sequence[bytes]) -> int:
        """Append records with consecutive LSNs in one group commit; the first LSN."""
        return self.service.append_many(records, self.replica_id)

    def read(self, first_lsn: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """[(lsn, WAL record)] from first_lsn, about max_bytes of them (at least one if any)."""
        if self._frames is not None:
            return self._frames.read_records(first_lsn, max_bytes)
        try:
            b = self.service.read_batch(first_lsn, max_bytes)
        except InvalidRange as exc:
            raise WalGoneError(str(exc)) from None
        buf, offs, lens = b.buf, b.offsets.tolist(), b.lengths.tolist()
        return [(first_lsn + k, buf[o + DATA_PREFIX:o + n]) for k, (o, n) in enumerate(zip(offs, lens))]

    @property
    def reads_in_place(self) -> bool:
        """True when read_refs maps the log's frames rather than copying them (the embedded log service)."""
        return hasattr(self.service, "read_batch_mapped")

    def read_refs(self, first_lsn: int, max_bytes: int) -> WalRefs | None:
        """The block references of the WAL from first_lsn, about max_bytes of it (None: nothing
        there), decoded by the Cython segment reader straight from the log's frames."""
        if self._frames is not None:
            return self._refs_of_records(first_lsn, max_bytes)
        # the embedded log service's frames are read in place (mapped), not copied
        read = self.service.read_batch_mapped if self.reads_in_place else self.service.read_batch
        parts, size, lsn = [], 0, first_lsn
        while size < max_bytes:
            try:
                b = read(lsn, max_bytes - size)
            except InvalidRange as exc:
                if parts:
                    break       # what was read stands; the next call reports the gap
                raise WalGoneError(str(exc)) from None
            if not len(b):
                break
            parts.append(_batch_refs(b))
            size += len(b.buf)
            lsn = b.next_lsn
        if not parts:
            return None
        ids = [np.full(len(p["lsn"]), k, np.int32) for k, p in enumerate(parts)]
        cat = {c: np.concatenate([p[c] for p in parts]) for c in ("tags", "lsn", "rec_off", "rec_len")}
        return WalRefs([p["buf"] for p in parts], np.concatenate(ids), cat["tags"], cat["lsn"], cat["rec_off"],
                       cat["rec_len"], max(p["max_xid"] for p in parts), lsn)

    def _refs_of_records(self, first_lsn: int, max_bytes: int) -> WalRefs | None:
        from logtide.replay.batch_replay import block_refs
        recs = self.read(first_lsn, max_bytes)
        if not recs:
            return None
        offs = np.zeros(len(recs) + 1, np.int64)
        np.cumsum([len(r) for _, r in recs], out=offs[1:])
        blob = np.frombuffer(b"".join(r for _, r in recs), np.uint8)
        lsns = np.fromiter((l for l, _ in recs), np.uint64, len(recs))
        tags, rec = block_refs(blob, offs)
        xid = int(blob[(offs[:-1, None] + np.arange(4, 8)).reshape(-1)].view("<u4").max())
        return WalRefs([blob], np.zeros(len(rec), np.int32), tags, lsns[rec], offs[:-1][rec],
                       (offs[1:] - offs[:-1])[rec].astype(np.uint32), xid, recs[-1][0] + 1)

    def latest_lsn(self) -> int:
        return self.service.get_latest_lsn()

    def truncate(self, lsn: int) -> None:
        """Mark every record <= lsn removable (only ever moves up)."""
        if lsn > self.service.get_truncated_lsn():
            self.service.truncate(lsn)

    def truncated_lsn(self) -> int:
        return self.service.get_truncated_lsn()

    def first_lsn(self) -> int:
        return self.service.get_first_lsn()
