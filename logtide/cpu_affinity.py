"""CPU affinity: confine a writer process (or a region of it) to a set of CPUs.

logtide's writers hand work between threads through futexes: an appender sleeps until its group
is durable, the flusher wakes it, the GIL passes it on. A wake-up that lands on another, idle CPU
costs that CPU an inter-processor interrupt and a wake from idle; on a virtual machine each is an
exit to the hypervisor. `bench/bench_wake_cost.py` measures a hand-over between two threads at
several times the CPU across two CPUs as on one. A process whose Python runs on one CPU at a time
anyway (the GIL) then does more work per CPU second confined to one CPU: `logtide --cpus 0 ...`
for a server, `confined({0})` around the threads of an embedded writer.

Linux only (sched_setaffinity). A bad spec or a CPU outside the process's allowed set is a
ValueError that names it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator

__all__ = ["parse_cpus", "confined", "confine_process", "allowed_cpus"]


def allowed_cpus() -> frozenset[int]:
    """The CPUs the calling thread may run on."""
    return frozenset(os.sched_getaffinity(0))


def parse_cpus(spec: str) -> frozenset[int]:
    """CPUs from a list such as "0", "0,2" or "0-3,6" (as taskset -c takes them)."""
    cpus: set[int] = set()
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a CPU list such as 0 or 0,2-3 is needed, not {spec!r}")
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"bad CPU list {spec!r}: {part.strip()!r} is not a CPU number or range") from None
        if first < 0 or last < first:
            raise ValueError(f"bad CPU list {spec!r}: {part.strip()!r} is not a CPU number or range")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def _checked(cpus: Iterable[int]) -> frozenset[int]:
    chosen = frozenset(int(c) for c in cpus)
    if not chosen:
        raise ValueError("an empty CPU set")
    # the kernel knows which CPUs this process may widen to (its cpuset): it keeps only those of a
    # new set, so set it on this thread, read it back and put the old one back
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, chosen)
        got = frozenset(os.sched_getaffinity(0))
    except OSError:                 # none of them is available
        got = frozenset()
    finally:
        os.sched_setaffinity(0, before)
    if got != chosen:
        raise ValueError(f"CPU {', '.join(map(str, sorted(chosen - got)))} is not available to this process "
                         f"(allowed: {', '.join(map(str, sorted(allowed_cpus())))})")
    return chosen


@contextmanager
def confined(cpus: Iterable[int]) -> Iterator[frozenset[int]]:
    """Run the calling thread, and every thread it starts meanwhile (they inherit it), on `cpus`;
    the calling thread's previous set is restored on exit (its children keep theirs)."""
    chosen = _checked(cpus)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, before)


def confine_process(cpus: Iterable[int]) -> frozenset[int]:
    """Confine every thread of this process, and those it starts later, to `cpus`."""
    chosen = _checked(cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), chosen)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return chosen
