"""Fixtures shared by the benchmarks."""
import os

import pytest

# BENCH_SCALE < 1 shrinks the work of every benchmark (the test suite runs them that way once).
SCALE = float(os.environ.get("BENCH_SCALE", "1"))


def scaled(n: int, minimum: int = 1000) -> int:
    return max(minimum, int(n * SCALE))


def cpu_pair_or_skip() -> tuple[frozenset[int], frozenset[int]]:
    """Two CPUs this process may use, one set each, for a one-CPU run beside a two-CPU one; a
    machine with one CPU has no second placement, so the benchmark is skipped there."""
    from logtide.cpu_affinity import allowed_cpus
    cpus = sorted(allowed_cpus())
    if len(cpus) < 2:
        pytest.skip("one CPU available: there is no second placement to compare")
    return frozenset(cpus[:1]), frozenset(cpus[1:2])


@pytest.fixture
def items(benchmark):
    """Record how many work items one round of a benchmark processes."""
    def record(n: int, **info) -> int:
        benchmark.extra_info["items"] = n
        benchmark.extra_info.update(info)
        return n
    return record
