"""HAKeeperConfig: logical time (ticks per second) and the per-role timeouts of the down rule.

HAKeeper never reads the wall clock: the leader proposes a tick `ticks_per_second` times a second,
and a store whose last heartbeat was applied at tick `last` is down at tick `now` when
`timeout × ticks_per_second + last < now`. The config is the leader's: the checkers take it as an
argument; the replicated state holds only ticks, so replicas agree whatever their configs.
"""
from __future__ import annotations

from dataclasses import dataclass

from logtide.engine.hakeeper.store_role import StoreRole
from logtide.errors import InvalidArgument

DEFAULT_TICKS_PER_SECOND = 10
DEFAULT_LOG_STORE_TIMEOUT = 300.0   # the seed's 5 minutes
DEFAULT_TN_STORE_TIMEOUT = 10.0     # the seed's 10 s
DEFAULT_CN_STORE_TIMEOUT = 30.0     # the seed's 30 s
DEFAULT_PRIMARY_TIMEOUT = 10.0      # the primary is watched like the TN: one writer whose loss stops writes
DEFAULT_RO_TIMEOUT = 30.0           # RO nodes are readers like CNs
DEFAULT_COMMAND_TIMEOUT = 10.0      # a schedule command is in flight this long before it may be issued again
DEFAULT_PROMOTE_LAG = 64            # a learner this many LSNs or fewer behind the leader is promoted


@dataclass(frozen=True)
class HAKeeperConfig:
    ticks_per_second: int = DEFAULT_TICKS_PER_SECOND
    log_store_timeout: float = DEFAULT_LOG_STORE_TIMEOUT
    tn_store_timeout: float = DEFAULT_TN_STORE_TIMEOUT
    cn_store_timeout: float = DEFAULT_CN_STORE_TIMEOUT
    primary_timeout: float = DEFAULT_PRIMARY_TIMEOUT
    ro_timeout: float = DEFAULT_RO_TIMEOUT
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    promote_lag: int = DEFAULT_PROMOTE_LAG

    def __post_init__(self) -> None:
        if isinstance(self.ticks_per_second, bool) or not isinstance(self.ticks_per_second, int) \
                or self.ticks_per_second < 1:
            raise InvalidArgument(f"ticks_per_second must be a positive int, got {self.ticks_per_second!r}")
        for name in ("log_store_timeout", "tn_store_timeout", "cn_store_timeout", "primary_timeout", "ro_timeout",
                     "command_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise InvalidArgument(f"{name} must be a positive number of seconds, got {v!r}")
        if isinstance(self.promote_lag, bool) or not isinstance(self.promote_lag, int) or self.promote_lag < 0:
            raise InvalidArgument(f"promote_lag must be an int >= 0, got {self.promote_lag!r}")

    def ticks(self, seconds: float) -> int:
        """Seconds as ticks (at least one)."""
        return max(1, round(seconds * self.ticks_per_second))

    def timeout_ticks(self, role: StoreRole) -> int:
        return self.ticks(self._timeout(role))

    def _timeout(self, role: StoreRole) -> float:
        if role == StoreRole.LOG:
            return self.log_store_timeout
        if role == StoreRole.TN:
            return self.tn_store_timeout
        if role == StoreRole.CN:
            return self.cn_store_timeout
        if role == StoreRole.PRIMARY:
            return self.primary_timeout
        return self.ro_timeout

    def expired(self, role: StoreRole, last_tick: int, current_tick: int) -> bool:
        """The down rule: timeout × ticks_per_second + last_tick < current_tick."""
        return self.timeout_ticks(role) + last_tick < current_tick

    @property
    def command_ticks(self) -> int:
        return self.ticks(self.command_timeout)
