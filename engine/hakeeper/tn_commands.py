"""What a TN store process does with HAKeeper's schedule commands.

A TN process runs one TN shard (1, as replica 1: `store_reports.tn_report`). `STOP_TN` of that
shard (the TN checker found it running on two stores and keeps the newest) ends the shard's
service: the process stops as on SIGTERM, closing the TN cleanly (its heartbeats stop, so
HAKeeper sees the shard gone from this store). Other commands are logged.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand

log = logging.getLogger("logtide.hakeeper")


def tn_command_runner(store_id: str, stop: threading.Event, shard_id: int = 1) -> Callable[[ScheduleCommand], None]:
    """run_command for a TN store's HeartbeatSender: STOP_TN of `shard_id` sets `stop`."""
    def run(c: ScheduleCommand) -> None:
        if c.kind == CommandType.STOP_TN and c.shard_id == shard_id:
            log.warning("store %s ran schedule command %s: stopping TN shard %d", store_id, c, shard_id)
            print(f"tn: HAKeeper stopped TN shard {shard_id} on {store_id} (STOP_TN)", flush=True)
            stop.set()
        else:
            log.warning("store %s received schedule command %s (not a TN store's to run)", store_id, c)
    return run
