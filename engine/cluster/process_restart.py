"""Starting again a recorded process of a local cluster that is not running: same role, id,
command line (so the same address and data directory) and log; its new pid and start time
replace the old ones in D/cluster.json under the layout lock.

Log stores do this for HAKeeper (START_TN of a TN store that died) and `cluster start` for a
person. Refused with ClusterStoppingError while `cluster down` stops the cluster, so a restart
never outlives a `down`.
"""
from __future__ import annotations

import os

from logtide.engine.cluster import process_state
from logtide.engine.cluster.layout import ClusterLayout, ProcessRecord
from logtide.engine.cluster.layout_lock import locked
from logtide.engine.cluster.spawn import spawn
from logtide.engine.cluster.store_process import process_of_store
from logtide.errors import ClusterStoppingError

STOPPING = "stopping"   # the layout option `cluster down` sets before it stops anything


def restart(d: str, name: str, reap: bool = False) -> tuple[ProcessRecord, bool]:
    """Start process ROLE#N of the cluster under `d` unless it runs; (its record, True if started now)."""
    return _restart(d, lambda layout: layout.find(name), reap)


def restart_store(d: str, store_id: str, reap: bool = True) -> tuple[ProcessRecord, bool]:
    """Start the process that heartbeats as HAKeeper store `store_id` unless it runs."""
    return _restart(d, lambda layout: process_of_store(layout, store_id), reap)


def _restart(d: str, pick, reap: bool) -> tuple[ProcessRecord, bool]:
    d = os.path.abspath(d)
    with locked(d):
        layout = ClusterLayout.load(d)
        p = pick(layout)
        if layout.options.get(STOPPING):
            raise ClusterStoppingError(f"{p.name} not started: `cluster down` stopped (or is stopping) the cluster "
                                       f"under {d}; `cluster up --dir {d}` starts it again")
        if process_state.running(p.pid, p.start_time):
            return p, False
        spawn(p, layout.dir, reap=reap)
        layout.save()
        return p, True
