"""WalLog: logtide's WAL on the log service. Each WAL record is the payload of one user record,
and the log-service LSN is the WAL LSN."""
from __future__ import annotations

from typing import Sequence

from logtide.errors import InvalidRange, WalGoneError

DATA_PREFIX = 12  # u32 BE update type + u64 BE replica id, before every user record's payload


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
