"""Starting a recorded process of a local cluster again, and the lock every writer of
D/cluster.json holds: real processes (sleepers standing in for cluster roles), real files.

A process that runs is not started twice; a killed one comes back with a new pid on its recorded
command line; after `cluster down` nothing starts (ClusterStoppingError); writers in separate
processes changing different records at once lose none of the changes; a held lock times out
with a typed error."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from logtide.engine.cluster import local_cluster, process_state
from logtide.engine.cluster.layout import ClusterLayout, ProcessRecord
from logtide.engine.cluster.layout_lock import LOCK_FILE, locked
from logtide.engine.cluster.log_store_role import mark
from logtide.engine.cluster.process_restart import restart, restart_store
from logtide.errors import ClusterLockTimeout, ClusterStoppingError, UnknownClusterProcess

pytestmark = pytest.mark.timeout(60)


def _layout(d, n: int = 2) -> ClusterLayout:
    (d / "logs").mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    procs = [ProcessRecord("spare", i, f"127.0.0.1:{9000 + i}", sleeper, str(d / "logs" / f"spare-{i}.log"))
             for i in range(1, n + 1)]
    procs.append(ProcessRecord("tn", 1, "127.0.0.1:9100", sleeper, str(d / "logs" / "tn-1.log")))
    layout = ClusterLayout(str(d), procs, {})
    layout.save()
    return layout


def test_restart_starts_once_records_the_new_pid_and_nothing_after_down(tmp_path):
    _layout(tmp_path)
    try:
        p, started = restart(str(tmp_path), "tn#1")
        assert started and process_state.running(p.pid, p.start_time)
        on_disk = ClusterLayout.load(str(tmp_path)).find("tn#1")
        assert (on_disk.pid, on_disk.start_time) == (p.pid, p.start_time)
        again, started = restart_store(str(tmp_path), "tn-1")     # by its HAKeeper store id
        assert not started and again.pid == p.pid
        local_cluster.kill(str(tmp_path), "tn#1")
        back, started = restart_store(str(tmp_path), "tn-1", reap=True)
        assert started and back.pid != p.pid and process_state.running(back.pid, back.start_time)
        with pytest.raises(UnknownClusterProcess):
            restart_store(str(tmp_path), "tn-9")
        with pytest.raises(UnknownClusterProcess):
            restart_store(str(tmp_path), "bogus")
    finally:
        assert local_cluster.down(str(tmp_path)) == ["tn#1"]
    assert not process_state.running(back.pid, back.start_time)
    with pytest.raises(ClusterStoppingError):
        restart(str(tmp_path), "tn#1")
    assert not process_state.running(ClusterLayout.load(str(tmp_path)).find("tn#1").pid, back.start_time)


_MARKER = """
import sys
from logtide.engine.cluster.log_store_role import mark
d, i = sys.argv[1], int(sys.argv[2])
for _ in range(20):
    mark(d, f"log-{i}", "logservice")
    mark(d, f"log-{i}", "spare")
mark(d, f"log-{i}", "logservice")
"""


def test_concurrent_writers_lose_no_change(tmp_path):
    _layout(tmp_path, n=6)
    writers = [subprocess.Popen([sys.executable, "-c", _MARKER, str(tmp_path), str(i)], cwd="/")
               for i in range(1, 7)]
    for w in writers:
        assert w.wait(60) == 0
    roles = {p.id: p.role for p in ClusterLayout.load(str(tmp_path)).processes if p.id <= 6 and p.role != "tn"}
    assert roles == {i: "logservice" for i in range(1, 7)}
    assert not mark(str(tmp_path), "log-1", "logservice")   # no change: nothing written


def test_a_held_lock_times_out_typed(tmp_path):
    _layout(tmp_path)
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ClusterLockTimeout):
            with locked(str(tmp_path), timeout=0.3):
                pass
    finally:
        os.close(fd)
    with locked(str(tmp_path), timeout=0.3):   # released with its holder's descriptor
        pass
