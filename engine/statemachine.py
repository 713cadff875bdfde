"""The replicated state machine interface (dragonboat's IStateMachine, as in the logservice seed).

Today every service runs single-node, applying its own log to one state machine. Replication
slots in under this interface: a Raft layer calls `update` on every replica in log order, so
`update` must be deterministic, and snapshots let a lagging replica catch up.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO


@dataclass(frozen=True)
class Entry:
    """One committed log entry: its index (the LSN) and its command bytes."""
    index: int
    cmd: bytes


class StateMachine(ABC):
    """Update / lookup / save_snapshot / recover_from_snapshot / close."""

    @abstractmethod
    def update(self, entry: Entry) -> Any:
        """Apply one committed entry and return its result. Same state + same entry => same result."""

    @abstractmethod
    def lookup(self, query: Any) -> Any:
        """Answer a read-only query; never changes the state."""

    @abstractmethod
    def save_snapshot(self, out: BinaryIO) -> int:
        """Write the whole state to `out`; returns the index of the last entry it contains."""

    @abstractmethod
    def recover_from_snapshot(self, src: BinaryIO) -> int:
        """Replace the state with a snapshot; returns the index of the last entry it contains."""

    @abstractmethod
    def close(self) -> None:
        """Release resources; the machine is unusable afterwards."""
