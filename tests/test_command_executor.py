"""CommandExecutor: commands run off the caller's thread, one at a time; a re-issued command that is
still waiting or running is not queued twice; one that waited past its deadline is dropped."""
from __future__ import annotations

import threading
import time

from logtide.engine.hakeeper.command_executor import CommandExecutor
from logtide.engine.hakeeper.schedule_command import CommandType as C
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.errors import UnknownReplicaError


def _cmd(rid: int, expires: int = 10) -> ScheduleCommand:
    return ScheduleCommand(C.STOP_REPLICA, "log-1", 1, rid, "log-1", expires_tick=expires)


def test_submit_returns_at_once_and_dedupes_and_drops_late_commands():
    release, ran = threading.Event(), []

    def run(c):
        ran.append(c.replica_id)
        if c.replica_id == 1:
            assert release.wait(5)
        if c.replica_id == 3:
            raise UnknownReplicaError("no replica 3")

    ex = CommandExecutor(run, "log-1", deadline=0.5)
    try:
        t0 = time.monotonic()
        ex.submit([_cmd(1)])
        ex.submit([_cmd(1, expires=99), _cmd(2)])   # 1 re-issued while it runs: not queued again
        assert time.monotonic() - t0 < 0.2           # the caller (the heartbeat thread) never waits
        time.sleep(0.8)                              # 2 waits past its deadline behind the blocked 1
        release.set()
        ex.submit([_cmd(3)])
        end = time.monotonic() + 5
        while ex.pending() and time.monotonic() < end:
            time.sleep(0.02)
        assert ran == [1, 3]
        assert [c.replica_id for c in ex.expired] == [2]
        assert ex.failed == [(_cmd(3), "UnknownReplicaError")]
    finally:
        ex.stop()
