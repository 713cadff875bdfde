"""HAKeeper's checkers: pure functions from (state, config) to schedule commands."""
from logtide.engine.hakeeper.checkers.coordinator import check, leader_batch

__all__ = ["check", "leader_batch"]
