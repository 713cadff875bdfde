"""The typed errors of logtide. Every error a user can meet derives from LogtideError."""


class LogtideError(Exception):
    """Base of every logtide error."""


class CorruptionError(LogtideError, ValueError):
    """Stored or received bytes failed verification (size, magic or CRC)."""


class CorruptBlockError(CorruptionError):
    """A fixed-size block (bloom block, table, page) is damaged or has the wrong size."""


# --- physical replication (replay/, _ext/page, _ext/redo) ---
class CorruptPageError(CorruptBlockError):
    """A data page failed its checksum or header check and no intact copy could repair it."""


class PageFullError(LogtideError):
    """A tuple does not fit in the free space of its page."""


class CorruptWALRecordError(CorruptionError):
    """A WAL record failed its CRC-32C or its lengths do not add up; it is never applied."""


class RedoError(LogtideError):
    """A WAL record cannot be applied to its page (wrong slot, no room): page and WAL disagree."""


class WalGoneError(LogtideError):
    """WAL needed for replay is no longer in the log (truncated) or was never written."""


class ReplicaError(LogtideError):
    """A read-only node cannot serve: it stopped on bad WAL, is not caught up, or was promoted."""
