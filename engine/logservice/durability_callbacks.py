"""Durability callbacks: registered (lsn, callback) pairs that a published LSN or a failure settles,
answered in registration order. LoopDurability and DurabilityWatcher keep theirs this way."""
from __future__ import annotations

import logging
from collections import deque
from typing import Callable

log = logging.getLogger("logtide.logservice")

Callback = Callable[[BaseException | None], None]


def pop_settled(pending: deque, published: int,
                failure: BaseException | None) -> list[tuple[Callback, BaseException | None]]:
    """Take from the front of `pending` every callback that `published` covers (answer None), and
    after a failure all of them (answer `failure` where not covered); in registration order."""
    settled = []
    while pending and (failure is not None or pending[0][0] <= published):
        lsn, callback = pending.popleft()
        settled.append((callback, None if lsn <= published else failure))
    return settled


def answer(callback: Callback, err: BaseException | None) -> None:
    """callback(err); one that raises is logged, so the callbacks after it still run."""
    try:
        callback(err)
    except Exception:  # noqa: BLE001 - a caller's bug must not stop the others' answers
        log.exception("a durability callback failed")
