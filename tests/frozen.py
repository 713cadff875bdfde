"""Freeze and thaw a process with SIGSTOP/SIGCONT: a peer that holds its sockets and answers nothing."""
import os
import signal
import time
from pathlib import Path


def all_stopped(pid: int) -> bool:
    """True once every thread of `pid` is stopped (SIGSTOP takes effect per thread, not at once)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        if stat[stat.rindex(")") + 2] not in "Tt":
            return False
    return True


def freeze(pid: int, timeout: float = 10.0) -> None:
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while not all_stopped(pid):
        if time.monotonic() > end:
            raise AssertionError(f"process {pid} did not stop within {timeout:g} s")
        time.sleep(0.01)


def thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)
