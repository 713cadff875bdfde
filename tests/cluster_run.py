"""Running `logtide cluster ...` from tests, and waiting on a condition with a deadline."""
from __future__ import annotations

import json
import subprocess
import sys
import time


def logtide(*args, check=True, timeout=200) -> subprocess.CompletedProcess:
    """`python -m logtide ARGS`; its exit status is asserted 0 unless check=False."""
    r = subprocess.run([sys.executable, "-m", "logtide", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd="/")
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def until(what: str, cond, timeout: float, step: float = 0.1):
    """cond()'s first truthy value; AssertionError naming `what` when none comes within `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"not within {timeout} s: {what}")


def cluster_processes(d) -> dict:
    """(role, id) -> the process as `cluster status --json` lists it."""
    st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
    return {(p["role"], p["id"]): p for p in st["processes"]}
