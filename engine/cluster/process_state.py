"""Whether a recorded process still runs: its pid is alive, not a zombie, and started when recorded."""
from __future__ import annotations

import os
import signal
import time


def start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()   # after "pid (comm) "
    if fields[0] in ("Z", "X"):                    # a zombie has exited: its parent has not reaped it
        return 0
    return int(fields[19])


def running(pid: int, started: int) -> bool:
    """True when `pid` runs and is the process that started at `started` (not a reuse of its pid)."""
    return pid > 0 and start_time(pid) == started != 0


def kill(pid: int, started: int, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` if the recorded process still runs; True when it was sent."""
    if not running(pid, started):
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pid: int, started: int, timeout: float) -> bool:
    """Wait until the recorded process no longer runs (reaping it when it is our child)."""
    end = time.monotonic() + timeout
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not running(pid, started):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
