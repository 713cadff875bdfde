"""The typed errors of the Spark jobs (all LogtideError)."""
from logtide.errors import CorruptionError, LogtideError, WalGoneError


class SparkSetupError(LogtideError):
    """Spark cannot start here (no Java runtime, no PySpark)."""


class ReplayInputError(LogtideError, ValueError):
    """The replay's input cannot give the pages at the target LSN (LSN beyond the log's end,
    below a stored page's LSN, or an out_dir that already exists)."""


class SegmentMissingError(WalGoneError):
    """A log segment the job needs is not in the directory (a gap in the LSNs)."""


class SegmentCorruptError(CorruptionError):
    """A frame or WAL record in a segment failed its checks; the message names segment and LSN."""


class SnapshotRangeError(LogtideError, ValueError):
    """A table snapshot was asked for a ts the TN no longer retains (below its history)."""
