"""CallLoop: the process's one asyncio thread, on which every pipelined call stream does its gRPC I/O.

Each call stream (engine/rpc/pipeline.py) is a grpc.aio bidirectional call on this loop. Callers
never touch the loop: they queue their frames in the stream's CallSlots and sleep on a futex. The
slots write an eventfd when the batch rule says send (CallSlots.poll), the loop writes the batch,
and it hands each ReplyBatch to the slots, which wake the callers. With gRPC's synchronous stack,
every stream had a sender thread, a reader thread and a channel poller that all woke per message;
here one thread serves every stream of every client in the process, so a message costs one
wake-up of this thread instead of several thread hand-offs (measured in docs/rpc.md).

A forked child gets a loop of its own at its first call (threads do not survive fork; fork_guard.py
says when gRPC is usable there at all). At interpreter exit the loop cancels every stream still
open: a client nobody closed must not keep a server of the same process (whose worker threads exit
waits for) serving its stream forever.
"""
from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours (see _at_exit)
import os
import threading
import weakref
from typing import Any, Awaitable

from logtide.errors import DeadlineExceededError

# a stream's set-up and tear-down on the loop finish within this (they do no network round trip)
LOOP_CALL_TIMEOUT_S = 10.0


class CallLoop:
    """A daemon thread running an asyncio event loop; CallLoop.get() is the process's one."""

    _lock = threading.Lock()
    _current: "CallLoop | None" = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="rpc-call-loop", daemon=True)
        # the streams and channels on this loop, each with an async shutdown() run at exit
        self.resources: weakref.WeakSet = weakref.WeakSet()
        self.thread.start()
        _at_exit(self)

    @classmethod
    def get(cls) -> "CallLoop":
        """The process's loop (started at the first call, and again in a forked child)."""
        cur = cls._current
        if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
            with cls._lock:
                cur = cls._current
                if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
                    cur = cls._current = CallLoop()
        return cur

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_loop(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def run(self, coro: Awaitable, what: str, timeout: float = LOOP_CALL_TIMEOUT_S) -> Any:
        """Run `coro` on the loop and return its result (DeadlineExceededError past `timeout`)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise DeadlineExceededError(f"{what}: the RPC loop did not answer within {timeout:g} s") from None

    def call_soon(self, fn, *args) -> None:
        """Run fn(*args) on the loop, soon (no result)."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:   # the loop is closed: interpreter shutdown
            pass

    async def _shutdown(self) -> None:
        for s in list(self.resources):
            try:
                await s.shutdown()
            except Exception:  # noqa: BLE001 - exiting: release what can be released
                pass

    def shutdown(self, timeout: float = 2.0) -> None:
        """Cancel every stream and close every channel still open on this loop."""
        if self.pid != os.getpid() or not self.thread.is_alive():
            return
        try:
            self.run(self._shutdown(), "closing the RPC loop's streams", timeout)
        except Exception:  # noqa: BLE001 - exiting
            pass


def _forget_after_fork() -> None:
    # the parent's loop thread does not exist in the child, and a parent thread may have held the lock
    CallLoop._lock = threading.Lock()
    CallLoop._current = None


os.register_at_fork(after_in_child=_forget_after_fork)


def _at_exit(cl: CallLoop) -> None:
    # threading's exit hooks run before non-daemon threads are joined and in reverse order of
    # registration, so this one runs before concurrent.futures joins the worker threads of servers
    # in this process (one may be serving a stream of ours); plain atexit would run too late
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        import atexit
        register = atexit.register
    try:
        register(cl.shutdown)
    except RuntimeError:   # already shutting down
        pass
