"""The log service client interface: the same calls on the embedded service and on a remote one."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from logtide.engine.logservice.log_format import USER_RECORD
from logtide.engine.logservice.record import LogRecord


@dataclass(frozen=True)
class LogServiceConfig:
    """What a client learns from `config()`."""
    dir: str
    fsync: str
    segment_size: int
    max_record_size: int
    truncation_interval: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RecordBatch:
    """Records first_lsn .. first_lsn + len - 1 without a Python object per record:
    record k's data is buf[offsets[k] : offsets[k] + lengths[k]]."""
    first_lsn: int
    types: np.ndarray    # u32
    offsets: np.ndarray  # u64, where each record's data starts in buf
    lengths: np.ndarray  # u32
    buf: bytes
    next_lsn: int

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def lsns(self) -> np.ndarray:
        return np.arange(self.first_lsn, self.first_lsn + len(self.lengths), dtype=np.uint64)

    def data_bytes(self) -> int:
        return int(self.lengths.sum(dtype=np.uint64))

    def records(self) -> list[LogRecord]:
        b = self.buf
        return [LogRecord(self.first_lsn + k, int(t), b[o:o + n])
                for k, (t, o, n) in enumerate(zip(self.types.tolist(), self.offsets.tolist(), self.lengths.tolist()))]


class LogServiceClient(ABC):
    """append / append_many / read / truncate / get_truncated_lsn / get_latest_lsn / get_tso_timestamp /
    config / close, plus reader registration for the truncation workflow."""

    @abstractmethod
    def append(self, payload: bytes | LogRecord, replica_id: int = 0, type: int = USER_RECORD) -> int:
        """Append one record (durable on return); returns its LSN. A LogRecord is appended as is."""

    @abstractmethod
    def append_many(self, payloads: Iterable[bytes], replica_id: int = 0, type: int = USER_RECORD) -> int:
        """Append records with consecutive LSNs in one group; returns the first LSN. `payloads` is a
        sequence of bytes-like objects or a 2-D uint8 numpy array (one payload per row)."""

    @abstractmethod
    def read(self, first_lsn: int, max_size: int) -> tuple[list[LogRecord], int]:
        """Records from first_lsn whose data totals at most max_size (at least one if any), and the
        LSN the next read starts at. InvalidRange below the first readable LSN or beyond latest + 1:
        the first readable LSN is truncated LSN + 1, or lower while a registered reader still needs
        older records; at latest + 1 the answer is ([], latest + 1)."""

    @abstractmethod
    def read_batch(self, first_lsn: int, max_size: int) -> RecordBatch:
        """`read` without a Python object per record."""

    @abstractmethod
    def truncate(self, lsn: int) -> None:
        """Mark every record <= lsn removable. Only moves up: InvalidTruncateLsn otherwise."""

    @abstractmethod
    def get_truncated_lsn(self) -> int: ...

    @abstractmethod
    def get_latest_lsn(self) -> int: ...

    @abstractmethod
    def get_tso_timestamp(self, count: int) -> int:
        """The caller owns [first, first + count); monotonic across calls and restarts."""

    @abstractmethod
    def config(self) -> LogServiceConfig: ...

    @abstractmethod
    def register_reader(self, name: str, replayed_lsn: int = 0) -> None:
        """A reader (TN, RO node) whose unreplayed records must not be deleted."""

    @abstractmethod
    def report_replayed(self, name: str, lsn: int) -> None:
        """The reader has replayed everything up to lsn."""

    @abstractmethod
    def unregister_reader(self, name: str) -> None: ...

    @abstractmethod
    def readers(self) -> dict[str, int]:
        """Registered readers and their replayed LSNs."""

    @abstractmethod
    def get_first_lsn(self) -> int:
        """The oldest readable LSN: above min(truncated LSN, every reader's replayed LSN)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
