"""A benchmark's server in a process of its own: started, found by its address, and its CPU time."""
from __future__ import annotations

import os
import subprocess


def start_server(cmd: list, cwd, label: str = " on ") -> tuple[subprocess.Popen, str]:
    """Start a server process that prints "... on HOST:PORT" as its first line: (Popen, address).
    `label` picks another address on that line (e.g. "gRPC on " for a log service's gRPC port)."""
    # outside the source tree, without the report's PYTHONPATH: the server imports the installed wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            cwd=str(cwd))
    line = proc.stdout.readline()
    if label not in line:
        proc.kill()
        proc.wait(timeout=30)
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))}...: the server did not start: {line!r}")
    return proc, line.split(label)[1].split()[0].rstrip(",")


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds so far, summed over its live threads in nanoseconds (schedstat: the
    clock-tick counts of /proc/PID/stat are too coarse for short rounds)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):   # the thread exited meanwhile
            pass
    return total / 1e9


def user_kernel_seconds(pid: int) -> tuple[float, float]:
    """A process's (user, kernel) CPU seconds so far, from /proc/PID/stat's clock ticks: coarse
    (10 ms), for rounds of seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def context_switches(pid: int) -> int:
    """A process's context switches so far (voluntary: it slept to wait; involuntary: it was
    preempted), summed over its live threads: on a VM each wake-up behind them is costly."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
        except (OSError, ValueError):   # the thread exited meanwhile
            pass
    return total
