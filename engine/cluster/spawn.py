"""Starting one process of a local cluster: detached from its starter (its own session), output
appended to its log, and its pid and start time recorded in its ProcessRecord."""
from __future__ import annotations

import os
import subprocess
import threading
import time

from logtide.engine.cluster import process_state
from logtide.engine.cluster.layout import ProcessRecord

START_TIME_WAIT_S = 5.0


def spawn(p: ProcessRecord, cwd: str, reap: bool = False) -> None:
    """Start `p` from its argv; sets p.pid and p.start_time. `reap`: a thread waits for the child,
    so a long-lived starter (a log store) leaves no zombie when the process dies."""
    os.makedirs(os.path.dirname(p.log), exist_ok=True)
    with open(p.log, "ab") as log:
        child = subprocess.Popen(p.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=cwd, start_new_session=True)
    p.pid, p.start_time = child.pid, 0
    end = time.monotonic() + START_TIME_WAIT_S
    while not p.start_time and time.monotonic() < end:
        p.start_time = process_state.start_time(child.pid)
        if child.poll() is not None:
            break
    if reap:
        threading.Thread(target=child.wait, name=f"reap-{p.name}", daemon=True).start()
