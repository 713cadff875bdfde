"""logtide: a log-replay storage engine with its hot paths in Cython.

The public names live here; the parts live in subpackages (logindex, replay, engine, spark).
"""
import os as _os

# gRPC's fork handlers restart its pollers in a forked child, which then aborts (SIGABRT) when the
# child closes descriptors before exec: PySpark starts its Java gateway that way (Popen with
# preexec_fn), so with any channel or server alive in the process the gateway could die at start.
# Read once, when grpc is first imported; a caller's own setting wins.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from logtide.errors import CorruptBlockError, CorruptionError, LogtideError
from logtide.pagetag import PageTag, tag_array, tag_rows
try:
    from logtide._ext.crc32c import crc32c
except ImportError as exc:  # the source folder logtide/ shadows the installed wheel
    raise ImportError(
        f"logtide was imported from {__path__[0]}, which has no compiled extensions: "
        "install it (`make install` or `pip install .`) and run from outside the source tree") from exc
from logtide._ext.murmur3 import murmur3_128, murmur3_128_many
from logtide._ext.bloom4k import Bloom4K

__version__ = "0.1.0"

__all__ = [
    "Bloom4K",
    "CorruptBlockError",
    "CorruptionError",
    "LogtideError",
    "PageTag",
    "crc32c",
    "murmur3_128",
    "murmur3_128_many",
    "tag_array",
    "tag_rows",
]

# meta-service (engine/meta): the embedded service and its gRPC client
from logtide.engine.meta import MetaService  # noqa: E402
from logtide.engine.meta.client import connect_meta  # noqa: E402

__all__ += ["MetaService", "connect_meta"]

# log service (engine/logservice)
from logtide.engine.logservice import LogRecord, LogService, connect_logservice  # noqa: E402
from logtide.errors import CorruptLogError, InvalidRange, InvalidTruncateLsn  # noqa: E402

__all__ += ["CorruptLogError", "InvalidRange", "InvalidTruncateLsn", "LogRecord", "LogService", "connect_logservice"]
from logtide.logindex import LogIndex  # noqa: E402  (issue 3: needs Bloom4K above)

__all__ += ["LogIndex"]

from logtide._ext.btree import BTree  # noqa: E402
from logtide.errors import ReadOnlySnapshotError  # noqa: E402
__all__ += ["BTree", "ReadOnlySnapshotError"]
