"""Fixtures shared by the benchmarks."""
import os

import pytest

# BENCH_SCALE < 1 shrinks the work of every benchmark (the test suite runs them that way once).
SCALE = float(os.environ.get("BENCH_SCALE", "1"))


def scaled(n: int, minimum: int = 1000) -> int:
    return max(minimum, int(n * SCALE))


@pytest.fixture
def items(benchmark):
    """Record how many work items one round of a benchmark processes."""
    def record(n: int, **info) -> int:
        benchmark.extra_info["items"] = n
        benchmark.extra_info.update(info)
        return n
    return record
