"""Linearizability checking (Wing & Gong with Lowe's memoization) and sequential models."""
from logtide.engine.raft.lincheck.checker import CheckResult, check_operations
from logtide.engine.raft.lincheck.history import INF, UNKNOWN, Operation
from logtide.engine.raft.lincheck.models import KVKeyModel, LogModel, RegisterModel

__all__ = ["CheckResult", "INF", "KVKeyModel", "LogModel", "Operation", "RegisterModel", "UNKNOWN", "check_operations"]
