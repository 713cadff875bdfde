"""The typed errors of logtide. Every error a user can meet derives from LogtideError."""


class LogtideError(Exception):
    """Base of every logtide error."""


class CorruptionError(LogtideError, ValueError):
    """Stored or received bytes failed verification (size, magic or CRC)."""


class CorruptBlockError(CorruptionError):
    """A fixed-size block (bloom block, table, page) is damaged or has the wrong size."""


class ReadOnlyError(LogtideError, TypeError):
    """A write reached a read-only view (a BTree snapshot)."""
