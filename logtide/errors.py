"""The typed errors of logtide. Every error a user can meet derives from LogtideError."""


class LogtideError(Exception):
    """Base of every logtide error."""


class CorruptionError(LogtideError, ValueError):
    """Stored or received bytes failed verification (size, magic or CRC)."""


class CorruptBlockError(CorruptionError):
    """A fixed-size block (bloom block, table, page) is damaged or has the wrong size."""


class CorruptRecordError(CorruptionError):
    """A WAL record (PostgreSQL XLogRecord layout) failed its length, header or CRC-32C checks."""


class CorruptWalPageError(CorruptionError):
    """A PostgreSQL WAL page or segment header is damaged (magic, address, continuation)."""


class LsnOrderError(LogtideError, ValueError):
    """An LSN went backwards where LSNs must be non-decreasing."""


class ReadOnlyError(LogtideError):
    """A write was attempted on a read-only (RO mode) LogIndex."""
