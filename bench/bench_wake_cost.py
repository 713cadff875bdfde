"""What a wake-up costs: two threads hand a token back and forth through pipes, each sleeping in
read() until the other writes, on one CPU against across two CPUs (logtide.cpu_affinity).

Every durable write in logtide is such a hand-over at least once (the appender sleeps until the
flusher wakes it; the GIL passes between threads), so this sets the floor of CPU per write. Each
benchmark reports the process CPU per hand-over (time.process_time: both threads, the kernel's
work included) and the context switches per hand-over. Across CPUs a wake-up sends an
inter-processor interrupt and wakes the other CPU from idle, which on a virtual machine are exits
to the hypervisor: the ratio below is how much of that a writer confined to one CPU saves.
"""
from __future__ import annotations

import os
import resource
import threading
import time

import pytest

from bench.conftest import cpu_pair_or_skip, scaled
from bench.ratios import Ratio
from logtide.cpu_affinity import confined

RATIOS = [
    Ratio("a thread hand-over (sleep in read, woken by the other thread's write): on one CPU vs across two CPUs",
          "test_handover[one-cpu]", "test_handover[two-cpus]", None, 27),
]


def _ping_pong(n: int, mine: frozenset[int], theirs: frozenset[int]) -> tuple[float, int]:
    """Hand a byte back and forth n times; (process CPU seconds, context switches) of both threads."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    ready = threading.Event()

    def other() -> None:
        os.sched_setaffinity(0, theirs)
        ready.set()
        for _ in range(n):
            os.read(r1, 1)
            os.write(w2, b"x")

    try:
        with confined(mine):
            t = threading.Thread(target=other)
            t.start()
            ready.wait()
            u0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
            for _ in range(n):
                os.write(w1, b"x")
                os.read(r2, 1)
            t.join()
            c1, u1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)
    return c1 - c0, (u1.ru_nvcsw + u1.ru_nivcsw) - (u0.ru_nvcsw + u0.ru_nivcsw)


@pytest.mark.benchmark(group="wake-cost")
@pytest.mark.parametrize("placement", ["one-cpu", "two-cpus"])
def test_handover(benchmark, items, placement):
    a, b = cpu_pair_or_skip()
    n = scaled(20000, minimum=500)
    items(2 * n)
    totals = {"cpu": 0.0, "switches": 0, "rounds": 0}

    def run() -> None:
        cpu, switches = _ping_pong(n, a, a if placement == "one-cpu" else b)
        totals["cpu"] += cpu
        totals["switches"] += switches
        totals["rounds"] += 1

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    # the warm-up round is counted in totals too: per hand-over figures over every round
    handovers = 2 * n * totals["rounds"]
    benchmark.extra_info["figures"] = {"cpu_us_per_handover": 1e6 * totals["cpu"] / handovers,
                                       "switches_per_handover": totals["switches"] / handovers}
