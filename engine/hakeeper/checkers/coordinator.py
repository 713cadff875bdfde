"""The checkers' coordinator: which checkers run in which bootstrap state, and the batch the
leader proposes.

In Bootstrapping only the bootstrap checker runs; in Running the log, TN, CN and RO checkers run,
in that order. `check` is a pure function of (state, config): the same inputs give the same
commands, with the same replica ids, on any replica.
"""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.bootstrap_checker import check_bootstrap
from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.checkers.cn_checker import check_cn
from logtide.engine.hakeeper.checkers.log_checker import check_log
from logtide.engine.hakeeper.checkers.ro_checker import check_ro
from logtide.engine.hakeeper.checkers.tn_checker import check_tn
from logtide.engine.hakeeper.cluster_info import BootstrapState
from logtide.engine.hakeeper.command import ScheduleCommandBatch
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.schedule_command import ScheduleCommand


def check(state: HAKeeperState, config: HAKeeperConfig) -> list[ScheduleCommand]:
    ctx = CheckContext(state, config)
    if state.bootstrap == BootstrapState.BOOTSTRAPPING:
        return check_bootstrap(ctx)
    if state.bootstrap != BootstrapState.RUNNING:
        return []
    return check_log(ctx) + check_tn(ctx) + check_cn(ctx) + check_ro(ctx)


def leader_batch(state: HAKeeperState, config: HAKeeperConfig, term: int) -> ScheduleCommandBatch | None:
    """The batch a leader of `term` proposes after checking `state`, or None when there is nothing to do."""
    cmds = check(state, config)
    return ScheduleCommandBatch(term, state.index, tuple(cmds)) if cmds else None
