"""A sustained run: client threads doing one operation in a loop for a fixed number of seconds.

The peer's side of a durable-write comparison is `pgbench -T`, whose figure is its steady rate
without connection set-up. This is logtide's side under the same rules: every client thread is
started and every object opened before the clock starts; the threads are released together, run
until the deadline, and the rate is the operations completed between release and deadline over
that time. A sample of the running count every second gives throughput over time, so a decay
(a segment roll, a flush, a collection) shows.
"""
from __future__ import annotations

import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from bench.conftest import SCALE

# how long each side of a peer comparison runs: 10 s at full scale (the floor); at small
# scales (the test suite's smoke runs) 1 s, one per-second sample
SECONDS = max(1, round(10 * SCALE))
# pgbench's side at small scales runs 2 s, the least in which pgbench -P 1 prints a progress line
PGBENCH_SECONDS = max(2, SECONDS)
# how long each etcd set-up is probed before the timed run (bench/etcd_cluster.py)
PROBE_SECONDS = max(0.1, 3 * SCALE)
WARMUP_SECONDS = 1.0 if SCALE >= 1 else 0.1


@dataclass
class SustainedRun:
    clients: int
    seconds: float                       # measured time, release to the last operation's end
    ops: int                             # operations completed in that time
    per_second: list[float] = field(default_factory=list)   # operations completed in each second
    cpu_s: float = 0.0                   # process CPU (user + system, all threads) while running
    switches: int = 0                    # context switches (voluntary + involuntary) while running

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def figures(self) -> dict:
        """The run's figures for extra_info: rate, per-second series, CPU and switches per operation."""
        return {"rate": self.rate, "seconds": self.seconds, "ops": self.ops, "per_second": self.per_second,
                "cpu_us_per_op": 1e6 * self.cpu_s / max(1, self.ops),
                "switches_per_op": self.switches / max(1, self.ops)}


def run_sustained(clients: int, seconds: float, op: Callable[[int], None]) -> SustainedRun:
    """Run op(client_index) in a loop in `clients` threads for `seconds`; re-raises the first error."""
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            start.wait()
            n = 0
            while not stop.is_set():
                op(k)
                n += 1
                counts[k] = n      # one slot per thread: no lock on the hot path
        except BaseException as exc:  # noqa: B902 - re-raised by the caller's thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start.wait()
    t0 = time.perf_counter()
    samples = [0]
    for s in range(1, int(seconds) + 1):
        stop.wait(max(0.0, t0 + s - time.perf_counter()))
        samples.append(sum(counts))
    stop.wait(max(0.0, t0 + seconds - time.perf_counter()))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0   # operations in flight at the deadline finish and count
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if errors:
        raise errors[0]
    total = sum(counts)
    return SustainedRun(clients, elapsed, total, [float(b - a) for a, b in zip(samples, samples[1:])],
                        (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
                        (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw))


def sustained_benchmark(benchmark, clients: int, op: Callable[[int], None], *, seconds: float = SECONDS,
                        warmup: float = WARMUP_SECONDS, **info) -> SustainedRun:
    """One warm-up run (connections, caches, the peer's own warm-up; not recorded), then one timed
    sustained run as the benchmark's round; its steady rate, series and figures go to extra_info
    (bench.report reads `rate`). Returns the timed run."""
    if warmup > 0:
        run_sustained(clients, warmup, op)
    runs: list[SustainedRun] = []
    benchmark.pedantic(lambda: runs.append(run_sustained(clients, seconds, op)), rounds=1, iterations=1)
    run = runs[0]
    f = run.figures()
    benchmark.extra_info.update(items=run.ops, clients=clients, rate=f.pop("rate"), per_second=f.pop("per_second"),
                                seconds=f.pop("seconds"), **info)
    f.pop("ops")
    benchmark.extra_info.setdefault("figures", {}).update(f)
    return run
