"""apply_decoded: one batch of write requests decoded and applied as one group of commands.

A request that does not decode gets its own error as its reply; the others are applied together
(one log group, one fsync). Shared by the single-process server and the Raft replicas.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence


def apply_decoded(requests: Sequence, decode: Callable[[Any], Any], apply: Callable[[list], list]) -> list:
    """Per request: apply's result for its command, or the exception its decoding raised."""
    out: List[Any] = [None] * len(requests)
    cmds, where = [], []
    for i, req in enumerate(requests):
        try:
            cmds.append(decode(req))
            where.append(i)
        except Exception as exc:  # noqa: BLE001 - that call's reply
            out[i] = exc
    if cmds:
        for i, r in zip(where, apply(cmds)):
            out[i] = r
    return out
