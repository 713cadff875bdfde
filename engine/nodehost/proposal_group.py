"""ProposalGroup: commands submitted together whose caller hears once, when every one is settled
(OneProposal: such a group of one command, the common frame of one call).

A server answering a batch of calls needs one callback for the batch, not a waitable Future per
command: each member here is a slotted object with no Event or lock (the driver thread settles
members one after another; RaftNode.stop settles the rest only after the driver has ended).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("logtide.raft")


class GroupMember:
    """One command of a group: what RaftNode keeps per proposal (index, term, set)."""
    __slots__ = ("group", "k", "index", "term")

    def __init__(self, group: "ProposalGroup", k: int) -> None:
        self.group = group
        self.k = k
        self.index = 0
        self.term = 0

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self.group.settle(self.k, value if error is None else error)


class ProposalGroup:
    """`done(results)` is called once, on the settling thread, with each command's state machine
    result or its exception, in submission order."""
    __slots__ = ("results", "left", "done", "settled")

    def __init__(self, n: int, done: Callable[[list], None]) -> None:
        self.results: list = [None] * n
        self.settled = [False] * n
        self.left = n
        self.done = done

    def members(self) -> list[GroupMember]:
        return [GroupMember(self, k) for k in range(len(self.results))]

    def settle(self, k: int, outcome: Any) -> None:
        if self.settled[k]:
            return
        self.settled[k] = True
        self.results[k] = outcome
        self.left -= 1
        if self.left == 0:
            try:
                self.done(self.results)
            except Exception:  # noqa: BLE001 - a caller's bug must not stop the driver
                log.exception("raft node: a group completion callback failed")


class OneProposal:
    """A group of one command: `done([outcome])` once, with no per-group bookkeeping (most server
    frames carry one call, and this is on every append's path twice: submit and apply)."""
    __slots__ = ("done", "index", "term")

    def __init__(self, done: Callable[[list], None]) -> None:
        self.done: Callable[[list], None] | None = done
        self.index = 0
        self.term = 0

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        done, self.done = self.done, None
        if done is None:
            return
        try:
            done([value if error is None else error])
        except Exception:  # noqa: BLE001 - a caller's bug must not stop the driver
            log.exception("raft node: a group completion callback failed")
