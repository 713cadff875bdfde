"""Cut a segment file back to a frame boundary: recovery's torn tail, Raft's replaced suffix."""
from __future__ import annotations

import os


def cut_tail(path: str, end: int) -> None:
    """Truncate the file at `end` (the end of its last frame to keep) and fsync it.

    ftruncate is atomic, so a crash leaves the file either whole or cut, never half-zeroed frames
    (which would read as a hole in the log); the writer pre-allocates zeros after `end` again.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, end)
        os.fsync(fd)
    finally:
        os.close(fd)
