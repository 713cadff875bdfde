"""The fork guard: gRPC in a process forked while its parent had gRPC open fails at once, typed.

gRPC does not survive fork() while channels, calls or servers are open (its own threads, poller
and connections are the parent's): a child that then made a call, or even a new channel, hung
until its deadline, or for ever while connecting. The guard tracks the process's open gRPC
objects (clients' transports, servers). A child forked while any was open refuses gRPC with
ForkedProcessError: its inherited clients at their next call, and new clients and servers when
made. A child forked with none open (or through 'spawn'/'forkserver') uses gRPC freely.
"""
from __future__ import annotations

import os
import weakref

from logtide.errors import ForkedProcessError

_open: weakref.WeakSet = weakref.WeakSet()
_forked_from: int | None = None     # the parent's pid, in a child forked with gRPC open
# in such a child, the inherited objects, kept alive: collecting the parent's channels and calls
# would run gRPC's finalizers on state that is not this process's
_inherited: list = []


def opened(obj) -> None:
    """`obj` holds gRPC resources until closed(obj); its forked_copy() runs in a forked child."""
    _open.add(obj)


def closed(obj) -> None:
    _open.discard(obj)


def check(what: str) -> None:
    """Raise ForkedProcessError in a child forked while gRPC was open (`what` names the use)."""
    if _forked_from is not None:
        raise refusal(what)


def refusal(what: str) -> ForkedProcessError:
    return ForkedProcessError(
        f"{what}: this process was forked from process {_forked_from} while it had gRPC clients or "
        "servers open, and gRPC does not work after such a fork; close them before forking, or start "
        "worker processes with multiprocessing's 'spawn' or 'forkserver' method")


def _after_in_child() -> None:
    global _forked_from
    inherited = list(_open)
    if not inherited:
        return
    _forked_from = os.getppid()
    _open.clear()
    _inherited.extend(inherited)
    for obj in inherited:
        obj.forked_copy()   # marks it refused; assigns attributes only, touches no gRPC state


os.register_at_fork(after_in_child=_after_in_child)
