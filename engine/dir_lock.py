"""DirLock: one open owner per directory, held by an exclusive flock on a lock file inside it.

The kernel drops the lock when its holder's process dies (kill -9 included), so a crashed owner
never blocks a restart; a second open of the directory, in this process or another, is refused
with DirectoryInUseError at once (never a wait). `still_ours()` tells whether the directory has
been removed or replaced under the holder (its lock file is no longer the file it locked): the
holder must then stop writing there, or it would race a newer owner of the path.
"""
from __future__ import annotations

import fcntl
import os

from logtide.errors import DirectoryInUseError


class DirLock:
    """An exclusive lock on `directory`/`name`, taken at construction; `release()` drops it."""

    def __init__(self, directory: str | os.PathLike, name: str = "LOCK", what: str = "directory",
                 error: type[DirectoryInUseError] = DirectoryInUseError) -> None:
        self.path = os.path.join(os.fspath(directory), name)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise error(f"{what} {os.path.dirname(os.path.abspath(self.path))} is in use: another open "
                        f"owner holds {name} (one open per directory)") from None
        self._fd = fd
        st = os.fstat(fd)
        self._ident = (st.st_dev, st.st_ino)

    def still_ours(self) -> bool:
        """False once the lock file at the path is not the one locked (directory removed or replaced)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._ident

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)   # drops the flock
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0
