"""Linearizability checking: the Wing & Gong search with Lowe's memoization (as porcupine does).

The history becomes a time-ordered list of call and return events. The search walks it: at a call
it tries to linearize that operation now (the model must accept its output), lifting the call and
its return out of the list; at a return whose call is still in the list it has hit an operation
that must already have happened, so it backtracks. Lowe's cache remembers every (set of
linearized operations, model state) already explored, which prunes the exponential search to what
distinct states exist. A timed-out operation returns at infinity: it can take effect anywhere
after its call, or at the very end, which is the same as never. The model first drops timed-out
operations whose effect nobody observed (for them, never taking effect is always consistent).
"""
from __future__ import annotations

from typing import Iterable

from logtide.engine.raft.lincheck.history import INF, Operation
from logtide.engine.raft.lincheck.models import Model


class _Node:
    __slots__ = ("op", "id", "is_call", "time", "match", "prev", "next")

    def __init__(self, op, id, is_call, time):
        self.op, self.id, self.is_call, self.time = op, id, is_call, time
        self.match = self.prev = self.next = None


def _event_list(ops: list[Operation]) -> _Node:
    events = []
    for i, op in enumerate(ops):
        c = _Node(op, i, True, op.call)
        r = _Node(op, i, False, op.ret)
        c.match = r
        events.append((op.call, 0, i, c))
        events.append((op.ret, 1, i, r))  # at equal times calls come first: overlap is allowed
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Node(None, -1, False, -INF)
    prev = head
    for *_k, node in events:
        prev.next = node
        node.prev = prev
        prev = node
    return head


def _lift(c: _Node) -> None:
    c.prev.next = c.next
    if c.next is not None:
        c.next.prev = c.prev
    r = c.match
    r.prev.next = r.next
    if r.next is not None:
        r.next.prev = r.prev


def _unlift(c: _Node) -> None:
    r = c.match
    r.prev.next = r
    if r.next is not None:
        r.next.prev = r
    c.prev.next = c
    if c.next is not None:
        c.next.prev = c


class CheckResult:
    def __init__(self, ok: bool, order: list[Operation], explored: int, partial: list[Operation]) -> None:
        self.ok = ok
        self.order = order        # a linearization when ok
        self.explored = explored  # search steps
        self.partial = partial    # when not ok: the longest prefix that could be linearized

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"CheckResult({'linearizable' if self.ok else 'NOT linearizable'}, {len(self.order)} ops)"


def check_operations(model: Model, ops: Iterable[Operation], max_steps: int = 10_000_000) -> CheckResult:
    """Is the history linearizable with respect to `model`? Raises TimeoutError past max_steps."""
    ops = list(ops)
    prune = getattr(model, "prune", None)
    if prune is not None:
        ops = prune(ops)
    for op in ops:
        if op.ret < op.call:
            raise ValueError(f"operation returns before it is called: {op}")
    head = _event_list(ops)
    state = model.init()
    linearized = 0
    cache: set = {(0, state)}
    stack: list[tuple[_Node, object]] = []
    best: list[Operation] = []
    entry = head.next
    steps = 0
    while head.next is not None:
        steps += 1
        if steps > max_steps:
            raise TimeoutError(f"linearizability search gave up after {max_steps} steps")
        if entry.is_call:
            ok, new_state = model.step(state, entry.op.input, entry.op.output)
            if ok:
                key = (linearized | (1 << entry.id), new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = new_state
                    linearized = key[0]
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            # a return whose operation is not linearized yet: something above must be undone
            if len(stack) > len(best):
                best = [e.op for e, _s in stack]
            if not stack:
                return CheckResult(False, [], steps, best)
            top, state = stack.pop()
            linearized &= ~(1 << top.id)
            _unlift(top)
            entry = top.next
    return CheckResult(True, [e.op for e, _s in stack], steps, [])
