"""FramedWal: the primary's dense WAL LSNs on a log whose LSNs have gaps (the replicated log).

The primary numbers its WAL records itself (a page is stamped with its record's LSN before the
append), so WAL LSNs must be dense and known in advance. On the replicated log an LSN is a Raft
index: user records' LSNs increase but skip internal entries, and are known only after the append.
So each group commit is one log record, a *frame*, that carries its records' WAL LSNs:

    [4s magic "LTWF"][u8 kind][u64 epoch][u64 first WAL LSN][u32 count][u32 length] x count [records]

A frame is one Raft entry: a group is in the log whole or not at all. Kind OPEN (count 0) is the
fence a primary appends when it opens; its log LSN is that primary's *epoch*, which every frame
it writes carries. A reader keeps the highest epoch seen and skips frames of a lower one: an
append of a dead primary that reaches the log after a new primary's fence is never read. An OPEN
frame's epoch field holds the highest epoch its primary had seen, so the fence outlives the
truncation of the frames that set it. Frames are records of type WAL_FRAME_RECORD; records of
other types belong to other writers sharing the log (a cluster's log shard) and are skipped. The
layout is in docs/replication.md.

Truncation and registered readers' LSNs are translated between WAL and log LSNs at frame
boundaries, always to the conservative side (hold more, never less). The newest record frame is
never truncated, so the WAL's end survives any truncation.
"""
from __future__ import annotations

import bisect
import logging
import struct
import threading

from logtide.engine.logservice.log_format import DATA_HEADER_SIZE, WAL_FRAME_RECORD
from logtide.engine.logservice.record import data_prefix
from logtide.errors import CorruptionError, InvalidArgument, InvalidRange, LogtideError, WalGoneError

log = logging.getLogger("logtide.replay.wal_frames")

FRAME = struct.Struct("<4sBQQI")
MAGIC = b"LTWF"
KIND_OPEN, KIND_RECORDS = 0, 1
SCAN_BYTES = 4 << 20


class FencedError(LogtideError):
    """Another primary opened on this log after this one (a newer epoch): this one must stop writing."""


def needs_frames(service) -> bool:
    """True for a log whose LSNs are not dense (the replicated client): the WAL goes in frames."""
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    return isinstance(service, ReplicatedLogServiceClient)


def encode_frame(kind: int, epoch: int, first_wal: int, records) -> bytes:
    lens = struct.pack(f"<{len(records)}I", *map(len, records))
    return FRAME.pack(MAGIC, kind, epoch, first_wal, len(records)) + lens + b"".join(records)


def decode_frame(lsn: int, data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(kind, epoch, first WAL LSN, records) of the frame at log LSN `lsn`."""
    if len(data) < FRAME.size:
        raise CorruptionError(f"log record {lsn} is not a WAL frame ({len(data)} bytes)")
    magic, kind, epoch, first, count = FRAME.unpack_from(data)
    end = FRAME.size + 4 * count
    if magic != MAGIC or kind not in (KIND_OPEN, KIND_RECORDS) or len(data) < end:
        raise CorruptionError(f"log record {lsn} is not a WAL frame (magic {magic!r}, kind {kind})")
    recs, off = [], end
    for n in struct.unpack_from(f"<{count}I", data, FRAME.size):
        recs.append(data[off:off + n])
        off += n
    if off != len(data):
        raise CorruptionError(f"WAL frame at log LSN {lsn}: lengths add up to {off} of {len(data)} bytes")
    return kind, epoch, first, recs


class FramedWal:
    """The WAL (dense LSNs) over a replicated log client. `writer=True` (a primary) appends its
    fence on open; a reader (an RO node) follows the log's tail as it reads."""

    def __init__(self, log_client, *, writer: bool, replica_id: int = 0) -> None:
        self.log = log_client
        self.writer = writer
        self.replica_id = replica_id
        self._lock = threading.RLock()          # the frame index
        self._append_lock = threading.Lock()
        self._fw: list[int] = []    # first WAL LSN of each live record frame, in order
        self._ll: list[int] = []    # its log LSN
        self._ep: list[int] = []    # its epoch
        self._next_wal = 1          # the next WAL LSN
        self._epoch = 0             # the highest epoch seen
        self._my_epoch = 0
        self._scan_lsn = 0          # the next log LSN to scan
        self._scan_from = 0         # the first log LSN scanned: OPEN frames below it are unseen
        self._truncated = 0         # WAL LSNs at or below it are truncated
        self.stale_frames = 0
        self.foreign_records = 0
        with self._lock:
            self._scan_lsn = self._scan_from = max(1, self.log.get_first_lsn())
            self._scan()
            self._forget_truncated(self.log.get_truncated_lsn())
            if writer:
                # the fence carries the newest epoch seen: a reader that starts after the frames
                # of that epoch are truncated still knows a frame of an older one is stale
                f = self.log.append(encode_frame(KIND_OPEN, self._epoch, self._next_wal, []), replica_id,
                                    type=WAL_FRAME_RECORD)
                self._scan()
                if self._epoch != f:
                    raise FencedError(f"a newer primary (epoch {self._epoch}) opened on this log after this one "
                                      f"(epoch {f})")
                self._my_epoch = f
                log.info("WAL on the replicated log: epoch %d, next WAL LSN %d", f, self._next_wal)

    # ------------------------------------------------------------------ reading the log
    def _scan(self) -> None:
        """Index every frame from the scan point to the log's end."""
        while True:
            try:
                recs, nxt = self.log.read(self._scan_lsn, SCAN_BYTES)
            except InvalidRange:
                first = self.log.get_first_lsn()
                if first <= self._scan_lsn:
                    raise
                self._scan_lsn = self._scan_from = first   # removed under us (compaction): the log starts later now
                continue
            for r in recs:
                if r.type != WAL_FRAME_RECORD:
                    self.foreign_records += 1       # another writer's record on the shared log
                    continue
                self._index(r.lsn, r.data[DATA_HEADER_SIZE:])
            self._scan_lsn = max(self._scan_lsn, nxt)
            if not recs:
                return

    def _index(self, lsn: int, data: bytes) -> None:
        kind, epoch, first, recs = decode_frame(lsn, data)
        if kind == KIND_OPEN:
            # `epoch` here is the highest epoch its primary had seen (0 in logs written before it was kept)
            self._supersede(lsn, first, epoch)
            self._epoch = max(self._epoch, lsn)
            if not self._fw:
                self._next_wal = max(self._next_wal, first)
            return
        if epoch < self._epoch:
            self.stale_frames += 1
            log.warning("skipped the WAL frame at log LSN %d: epoch %d, fenced by epoch %d", lsn, epoch, self._epoch)
            return
        self._supersede(epoch, first)
        if self._fw and first != self._next_wal:   # (the frame before it is of the same epoch)
            if epoch < self._scan_from:
                # its epoch's OPEN is truncated, so these frames may be a dead primary's: two
                # frames of one primary that do not continue each other are never both live,
                # and a later one is stale whenever an earlier one is (a newer fence lies
                # before both). So this one is stale; a newer epoch's frame drops the rest.
                self.stale_frames += 1
                log.warning("skipped the WAL frame at log LSN %d: it does not continue epoch %d's WAL, "
                            "whose fence is truncated", lsn, epoch)
                return
            raise CorruptionError(f"WAL frame at log LSN {lsn} starts at WAL LSN {first}, expected {self._next_wal}")
        self._epoch = epoch
        if not recs:
            return
        self._fw.append(first)
        self._ll.append(lsn)
        self._ep.append(epoch)
        self._next_wal = first + len(recs)

    def _supersede(self, epoch: int, first: int, fenced_by: int = 0) -> None:
        """A frame (or fence) of `epoch` starts at WAL LSN `first`; a fence also names `fenced_by`,
        the highest epoch its primary had seen. Indexed frames of an older epoch that lie after
        `epoch`'s fence or after `fenced_by`'s, or that do not end exactly at `first`, were a dead
        primary's, written after a newer fence (a reader that started past a truncated fence took
        them for live): drop them again. The live WAL continues at `first`: the primary of `epoch`
        had scanned the whole log when it chose it."""
        while self._fw and self._ep[-1] < epoch and (self._next_wal != first or self._ll[-1] > epoch
                                                      or self._ep[-1] < fenced_by < self._ll[-1]):
            self._next_wal = self._fw.pop()
            self._ll.pop()
            self._ep.pop()
            self.stale_frames += 1
            log.warning("dropped a WAL frame of an epoch older than %d: that epoch rewrote its WAL LSNs", epoch)

    def _forget_truncated(self, log_truncated: int) -> None:
        """Drop the frames at or below the log's truncated LSN (the log may refuse to read them)."""
        self._truncated = max(self._truncated, self._wal_at_or_below(log_truncated))
        j = bisect.bisect_right(self._ll, log_truncated)
        del self._fw[:j], self._ll[:j], self._ep[:j]

    def _wal_at_or_below(self, log_lsn: int) -> int:
        """The highest WAL LSN whose frame, and every earlier one, lies at or below log LSN `log_lsn`."""
        j = bisect.bisect_right(self._ll, log_lsn)
        if j == len(self._ll):
            return self._next_wal - 1 if (j or log_lsn) else 0
        return self._fw[j] - 1

    def _log_below(self, wal_lsn: int) -> int:
        """The highest log LSN below the frame that holds WAL LSN `wal_lsn` + 1."""
        if not self._fw:
            return self._scan_lsn - 1
        k = bisect.bisect_right(self._fw, wal_lsn + 1) - 1
        if wal_lsn + 1 >= self._next_wal:
            return self._ll[-1]
        if k < 0:
            return self._ll[0] - 1
        return self._ll[k] - 1

    # ------------------------------------------------------------------ the log-service API, in WAL LSNs
    def append_many(self, records, replica_id: int = 0) -> int:
        """Append records as one frame (one Raft entry); the first WAL LSN."""
        if not self.writer:
            raise InvalidArgument("this WAL view reads only (an RO node)")
        records = [bytes(r) for r in records]
        if not records:
            raise InvalidArgument("append_many needs at least one record")
        with self._append_lock:   # one frame at a time; readers go on meanwhile (the index lock is not held)
            first = self._next_wal
            lsn = self.log.append(encode_frame(KIND_RECORDS, self._my_epoch, first, records), self.replica_id,
                                  type=WAL_FRAME_RECORD)
            with self._lock:
                self._fw.append(first)
                self._ll.append(lsn)
                self._ep.append(self._my_epoch)
                self._next_wal = first + len(records)
                self._scan_lsn = lsn + 1
            return first

    def append(self, record: bytes, replica_id: int = 0) -> int:
        return self.append_many([record], replica_id)

    def read_records(self, first_wal: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """[(WAL LSN, record)] from first_wal, about max_bytes of them (at least one if any)."""
        with self._lock:
            if first_wal >= self._next_wal and not self.writer:
                self._scan()
            if first_wal >= self._next_wal:
                return []
            if not self._fw or first_wal < self._fw[0] or first_wal <= 0:
                raise WalGoneError(f"WAL LSN {first_wal} is truncated (the log holds WAL from "
                                   f"{self._fw[0] if self._fw else self._next_wal})")
            k = bisect.bisect_right(self._fw, first_wal) - 1
            live = dict(zip(self._ll[k:], self._fw[k:]))
            cursor, last = self._ll[k], self._ll[-1]
        out: list[tuple[int, bytes]] = []
        size = 0
        while cursor <= last and (not out or size < max_bytes):
            try:
                recs, nxt = self.log.read(cursor, max_bytes + (64 << 10))
            except InvalidRange as exc:
                raise WalGoneError(f"WAL LSN {first_wal}: {exc}") from None
            if not recs:
                break
            for r in recs:
                if r.lsn not in live:
                    continue        # a fence, or a stale epoch's frame
                _, _, first, frame_recs = decode_frame(r.lsn, r.data[DATA_HEADER_SIZE:])
                for i, rec in enumerate(frame_recs):
                    if first + i >= first_wal:
                        out.append((first + i, rec))
                        size += len(rec)
                if size >= max_bytes:
                    break
            cursor = nxt
        return out

    def read_batch(self, first_lsn: int, max_size: int):
        """The embedded client's RecordBatch shape (records with their 12-byte data prefix)."""
        import numpy as np
        from logtide.engine.logservice.client import RecordBatch
        recs = self.read_records(first_lsn, max_size)
        pre = data_prefix(self.replica_id)
        datas = [pre + r for _, r in recs]
        lengths = np.array([len(d) for d in datas], dtype=np.uint32)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.uint64)[:-1]]).astype(np.uint64) if datas \
            else np.empty(0, dtype=np.uint64)
        return RecordBatch(first_lsn, np.zeros(len(datas), dtype=np.uint32), offsets, lengths, b"".join(datas),
                           first_lsn + len(datas))

    def get_latest_lsn(self) -> int:
        with self._lock:
            if not self.writer:
                self._scan()
            return self._next_wal - 1

    def get_first_lsn(self) -> int:
        with self._lock:
            if not self.writer:
                self._forget_truncated(self.log.get_truncated_lsn())
            return self._fw[0] if self._fw else self._next_wal

    def get_truncated_lsn(self) -> int:
        """WAL LSNs at or below it may be gone (the writer truncates; a reader asks the log)."""
        if not self.writer:
            with self._lock:
                self._forget_truncated(self.log.get_truncated_lsn())
        return self._truncated

    def truncate(self, wal_lsn: int) -> None:
        """Truncate the log below the newest frame whose records are all at or below `wal_lsn`
        (never the newest frame: it carries the WAL's end)."""
        with self._lock:
            j = bisect.bisect_right(self._fw, wal_lsn + 1) - 1   # frames before j end at or below wal_lsn
            j = min(j, len(self._fw) - 1)
            if j <= 0:
                return
            self.log.truncate(self._ll[j - 1])
            self._truncated = max(self._truncated, self._fw[j] - 1)
            del self._fw[:j], self._ll[:j], self._ep[:j]

    # --- registered readers (RO nodes' truncation holds), their LSNs translated
    def register_reader(self, name: str, replayed_lsn: int = 0) -> None:
        with self._lock:
            at = self._log_below(replayed_lsn) if replayed_lsn else 0
        self.log.register_reader(name, at)

    def report_replayed(self, name: str, lsn: int) -> None:
        with self._lock:
            at = self._log_below(lsn)
        self.log.report_replayed(name, at)

    def unregister_reader(self, name: str) -> None:
        self.log.unregister_reader(name)

    def readers(self) -> dict[str, int]:
        # the replicated client answers readers() from one replica's Status, with no ReadIndex: a
        # lagging replica would miss registrations. A linearizable read first leaves the client on a
        # replica that has applied every acknowledged command, and Status goes to that replica.
        self.log.get_truncated_lsn()
        got = self.log.readers()
        with self._lock:
            return {n: self._wal_at_or_below(at) for n, at in got.items()}

    def close(self) -> None:
        """The view holds nothing of its own; the log client is its owner's to close."""
