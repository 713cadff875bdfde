"""Make a directory's entries (a created, renamed or removed file) durable."""
from __future__ import annotations

import os


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync the directory `path`, so a rename or create inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
