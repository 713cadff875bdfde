"""LogRecord: one record of the log, as the seed's pb.LogRecord (lsn, type, data)."""
from __future__ import annotations

from logtide.engine.logservice.log_format import DATA_HEADER, DATA_HEADER_SIZE, USER_ENTRY_UPDATE, USER_RECORD


class LogRecord:
    """A log record. For records appended through the client, `data` is
    [u32 BE update type = USER_ENTRY_UPDATE][u64 BE replica id][payload]."""

    __slots__ = ("lsn", "type", "data")

    def __init__(self, lsn: int, type: int, data: bytes) -> None:
        self.lsn = lsn
        self.type = type
        self.data = data

    @classmethod
    def user(cls, payload: bytes, replica_id: int = 0, type: int = USER_RECORD, lsn: int = 0) -> "LogRecord":
        """A record to append: data built from the payload and replica id (lsn is assigned by append)."""
        return cls(lsn, type, data_prefix(replica_id) + bytes(payload))

    @property
    def update_type(self) -> int:
        return DATA_HEADER.unpack_from(self.data)[0] if len(self.data) >= DATA_HEADER_SIZE else -1

    @property
    def replica_id(self) -> int:
        return DATA_HEADER.unpack_from(self.data)[1] if len(self.data) >= DATA_HEADER_SIZE else 0

    @property
    def payload(self) -> bytes:
        return self.data[DATA_HEADER_SIZE:]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogRecord):
            return NotImplemented
        return (self.lsn, self.type, self.data) == (other.lsn, other.type, other.data)

    def __hash__(self) -> int:
        return hash((self.lsn, self.type, self.data))

    def __repr__(self) -> str:
        return f"LogRecord(lsn={self.lsn}, type={self.type}, replica_id={self.replica_id}, payload={len(self.data) - DATA_HEADER_SIZE}B)"


def data_prefix(replica_id: int) -> bytes:
    """The 12-byte header of a user record's data."""
    if not isinstance(replica_id, int) or isinstance(replica_id, bool) or not 0 <= replica_id < 1 << 64:
        from logtide.errors import InvalidArgument
        raise InvalidArgument(f"replica_id must be an int in [0, 2**64), got {replica_id!r}")
    return DATA_HEADER.pack(USER_ENTRY_UPDATE, replica_id)
