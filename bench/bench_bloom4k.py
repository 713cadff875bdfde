"""Bloom4K against rbloom and pybloom-live, per call and in batches."""
import numpy as np
import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("Bloom4K `in` per call vs rbloom `in`", "test_bloom4k_in", "test_rbloom_in", 1.0, 2),
    Ratio("Bloom4K `in` per call vs pybloom-live `in`", "test_bloom4k_in", "test_pybloom_live_in", 30.0, 2),
    Ratio("Bloom4K contains_many (1M keys, all cores) vs rbloom per-call loop", "test_bloom4k_contains_many",
          "test_rbloom_in_loop_1m", 10.0, 2),
    Ratio("Bloom4K contains_many (1M keys, one thread) vs rbloom per-call loop",
          "test_bloom4k_contains_many_one_thread", "test_rbloom_in_loop_1m", 10.0, 2),
]

N_TABLE = 819


def _workload(n):
    """819 member tags (one LogIndex table) and n probe keys, 10% of them members."""
    from logtide.pagetag import random_tags
    members = random_tags(N_TABLE, seed=1, relations=64, blocks=1 << 24)
    probes = random_tags(n, seed=2, relations=64, blocks=1 << 24)
    probes[:, 2] += 1_000_000
    idx = np.arange(0, n, 10)
    probes[idx] = members[idx % N_TABLE]
    return members, probes


def _as_bytes(arr):
    from logtide import tag_rows
    return [r.tobytes() for r in tag_rows(arr)]


@pytest.fixture(scope="module")
def per_call():
    members, probes = _workload(scaled(100_000))
    return _as_bytes(members), _as_bytes(probes)


@pytest.fixture(scope="module")
def batch():
    return _workload(scaled(1_000_000))


def _loop(keys, f):
    for k in keys:
        k in f


@pytest.mark.benchmark(group="bloom-per-call")
def test_bloom4k_in(benchmark, items, per_call):
    from logtide import Bloom4K
    members, probes = per_call
    b = Bloom4K()
    for k in members:
        b.add(k)
    items(len(probes))
    benchmark(_loop, probes, b)


@pytest.mark.benchmark(group="bloom-per-call")
def test_rbloom_in(benchmark, items, per_call):
    import rbloom
    members, probes = per_call
    b = rbloom.Bloom(N_TABLE, 3e-7)  # the false-positive rate of Bloom4K at 819 elements, k = 10
    for k in members:
        b.add(k)
    items(len(probes))
    benchmark(_loop, probes, b)


@pytest.mark.benchmark(group="bloom-per-call")
def test_pybloom_live_in(benchmark, items, per_call):
    from pybloom_live import BloomFilter
    members, probes = per_call
    b = BloomFilter(capacity=N_TABLE, error_rate=3e-7)
    for k in members:
        b.add(k)
    probes = probes[: max(1000, len(probes) // 10)]  # it is slow; time per item is what counts
    items(len(probes))
    benchmark(_loop, probes, b)


@pytest.mark.benchmark(group="bloom-batch")
def test_bloom4k_contains_many(benchmark, items, batch):
    from logtide import Bloom4K
    members, probes = batch
    b = Bloom4K()
    b.add_many(members)
    items(len(probes))
    out = benchmark(b.contains_many, probes)
    assert out[::10].all()


@pytest.mark.benchmark(group="bloom-batch")
def test_bloom4k_contains_many_one_thread(benchmark, items, batch):
    from logtide import Bloom4K
    members, probes = batch
    b = Bloom4K()
    b.add_many(members)
    items(len(probes))
    out = benchmark(b.contains_many, probes, threads=1)
    assert out[::10].all()


@pytest.mark.benchmark(group="bloom-batch")
def test_rbloom_in_loop_1m(benchmark, items, batch):
    import rbloom
    members, probes = batch
    b = rbloom.Bloom(N_TABLE, 3e-7)
    for k in _as_bytes(members):
        b.add(k)
    keys = _as_bytes(probes)
    items(len(keys))
    benchmark(_loop, keys, b)
