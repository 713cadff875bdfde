"""The typed errors of logtide. Every error a user can meet derives from LogtideError."""


class LogtideError(Exception):
    """Base of every logtide error."""


class CorruptionError(LogtideError, ValueError):
    """Stored or received bytes failed verification (size, magic or CRC)."""


class CorruptBlockError(CorruptionError):
    """A fixed-size block (bloom block, table, page) is damaged or has the wrong size."""


class MetaError(LogtideError):
    """A meta-service request failed."""


class MetaInvalidArgument(MetaError, ValueError, TypeError):
    """A meta-service request is malformed: wrong type, bad operator, oversize key or value."""


class MetaClosedError(MetaError):
    """The meta-service (or its client, or a watch stream) has been closed."""


class MetaUnavailableError(MetaError):
    """The meta-service could not be reached (connection refused, deadline exceeded)."""
