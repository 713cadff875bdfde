"""The fork guard: gRPC in a process forked from one that had used gRPC fails at once, typed.

gRPC does not survive fork() once it has been used: the child inherits the parent's connections,
poller and event engine state but not its threads. Such a child hung, an inherited client until
its call's deadline and a new client, even when the parent had closed all of its own, often for
ever while connecting. gRPC's own fork support cannot help here (it is off, see
logtide/__init__.py, and skips its handlers while any thread is in a call). The guard notes when
the process first uses gRPC (a client's transport, a server) and tracks the objects still open. A
child forked after that refuses gRPC with ForkedProcessError: its inherited clients at their next
call, new clients and servers when made. A child forked before the first use, or a worker started
with 'spawn' or 'forkserver', uses gRPC freely.
"""
from __future__ import annotations

import os
import weakref

from logtide.errors import ForkedProcessError

_open: weakref.WeakSet = weakref.WeakSet()
_used = False                        # this process has made a gRPC channel or server
_forked_from: int | None = None     # the parent's pid, in a child forked after gRPC was used
# in such a child, the inherited objects, kept alive: collecting the parent's channels and calls
# would run gRPC's finalizers on state that is not this process's
_inherited: list = []


def opened(obj) -> None:
    """`obj` holds gRPC resources until closed(obj); its forked_copy() runs in a forked child."""
    global _used
    _used = True
    _open.add(obj)


def closed(obj) -> None:
    _open.discard(obj)


def check(what: str) -> None:
    """Raise ForkedProcessError in a child forked after gRPC was used (`what` names the use)."""
    if _forked_from is not None:
        raise refusal(what)


def refusal(what: str) -> ForkedProcessError:
    return ForkedProcessError(
        f"{what}: this process was forked from process {_forked_from} after that one had used gRPC, "
        "and gRPC does not work after such a fork; fork before the first client or server is made, "
        "or start worker processes with multiprocessing's 'spawn' or 'forkserver' method")


def _after_in_child() -> None:
    global _forked_from
    if not _used:
        return
    inherited = list(_open)
    _forked_from = os.getppid()
    _open.clear()
    _inherited.extend(inherited)
    for obj in inherited:
        obj.forked_copy()   # marks it refused; assigns attributes only, touches no gRPC state


os.register_at_fork(after_in_child=_after_in_child)
