"""CheckContext: what every checker reads besides the state: the config, the working and expired
stores of each role (the down rule at the current tick), the replica ids a round hands out, and
the commands in flight."""
from __future__ import annotations

from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole


class CheckContext:
    def __init__(self, state: HAKeeperState, config: HAKeeperConfig) -> None:
        self.state = state
        self.config = config
        # a command is in flight for command_ticks from now, and again from its delivery
        self.lifetime = {"expires_tick": state.tick + config.command_ticks, "timeout_ticks": config.command_ticks}
        self._next_id = state.next_replica_id
        self.working: dict[StoreRole, list[str]] = {role: [] for role in StoreRole}
        self.expired: dict[StoreRole, list[str]] = {role: [] for role in StoreRole}
        for sid in sorted(state.stores):
            s = state.stores[sid]
            down = config.expired(s.role, s.tick, state.tick)
            (self.expired if down else self.working)[s.role].append(sid)

    def is_working(self, store_id: str, role: StoreRole) -> bool:
        return store_id in self.working[role]

    def new_replica_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid

    def in_flight(self) -> list[ScheduleCommand]:
        return list(self.state.in_flight.values())
