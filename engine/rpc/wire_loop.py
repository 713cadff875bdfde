"""WireLoop: the process's one uvloop event loop thread, which does every framed-carrier connection's
I/O, client and server alike (engine/rpc/wire_client.py, wire_server.py).

Callers never run on it: a unary call is packed into its connection's CallSlots and waited for
there in C (_ext/call_slots.pyx); the slots write an eventfd that the loop watches when a batch may
go. A servicer runs on it only where it never waits (nonblocking methods, the start of deferred
calls, loop streams); a batch of blocking calls goes to a worker. Frames are split, checked and
encoded in C (_ext/wire_codec.pyx), and Python runs on it once per frame batch.

A forked child gets a loop of its own at its first use (threads do not survive fork), and its
inherited clients open new connections there.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any, Awaitable

import uvloop

from logtide.errors import DeadlineExceededError

# set-up and tear-down on the loop (a connect has its own deadline) finish within this
LOOP_CALL_TIMEOUT_S = 10.0


class WireLoop:
    """A daemon thread running a uvloop event loop; WireLoop.get() is the process's one."""

    _lock = threading.Lock()
    _current: "WireLoop | None" = None
    forks = 0       # bumped in a forked child: a per-call check cheaper than os.getpid(), a syscall

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="rpc-wire-loop", daemon=True)
        self.thread.start()
        self.ident = self.thread.ident

    @classmethod
    def get(cls) -> "WireLoop":
        """The process's loop (started at the first use, and again in a forked child)."""
        cur = cls._current
        if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
            with cls._lock:
                cur = cls._current
                if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
                    cur = cls._current = WireLoop()
        return cur

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable, what: str, timeout: float = LOOP_CALL_TIMEOUT_S) -> Any:
        """Run `coro` on the loop and return its result (DeadlineExceededError past `timeout`)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        # wait first, then take the result: the coroutine's own deadline errors are TimeoutErrors too
        if not concurrent.futures.wait([fut], timeout).done:
            fut.cancel()
            raise DeadlineExceededError(f"{what}: not done within {timeout:g} s") from None
        return fut.result()

    def call_soon(self, fn, *args) -> None:
        """Run fn(*args) on the loop, soon (from any thread; nothing once the loop is closed)."""
        try:
            if threading.get_ident() == self.ident:
                # on the loop already: the threadsafe call would wake the loop once more, through
                # its eventfd, which a loop answering from its own callbacks pays on every batch
                self.loop.call_soon(fn, *args)
            else:
                self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:   # the loop is closed: interpreter shutdown
            pass


def _forget_after_fork() -> None:
    # the parent's loop thread does not exist in the child, and a parent thread may have held the lock
    WireLoop._lock = threading.Lock()
    WireLoop._current = None
    WireLoop.forks += 1


os.register_at_fork(after_in_child=_forget_after_fork)
