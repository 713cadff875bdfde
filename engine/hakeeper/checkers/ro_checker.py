"""The RO checker: an RO node whose heartbeats stopped for longer than its timeout is dropped, and
with it its hold on truncation (its min used LSN no longer keeps the log)."""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole


def check_ro(ctx: CheckContext) -> list[ScheduleCommand]:
    return [ScheduleCommand(CommandType.DROP_RO_NODE, sid, store_tick=ctx.state.stores[sid].tick,
                            **ctx.lifetime)
            for sid in ctx.expired[StoreRole.RO]]
