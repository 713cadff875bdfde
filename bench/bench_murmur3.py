"""Batch murmur3 over PageTag arrays against a Python loop of mmh3.hash128."""
import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("murmur3_128_many (1M 20-byte keys) vs Python loop of mmh3.hash128", "test_murmur3_many",
          "test_mmh3_loop", 10.0, 2),
]


@pytest.fixture(scope="module")
def tags():
    from logtide.pagetag import random_tags
    return random_tags(scaled(1_000_000), seed=3)


@pytest.mark.benchmark(group="murmur3")
def test_murmur3_many(benchmark, items, tags):
    from logtide import murmur3_128_many
    items(len(tags))
    benchmark(murmur3_128_many, tags)


@pytest.mark.benchmark(group="murmur3")
def test_mmh3_loop(benchmark, items, tags):
    import mmh3
    from logtide import tag_rows
    keys = [r.tobytes() for r in tag_rows(tags)]
    items(len(keys))

    def loop():
        h = mmh3.hash128
        for k in keys:
            h(k, 0, True, False)

    benchmark(loop)
