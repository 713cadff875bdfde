"""BTree against BTrees' LLBTree and sortedcontainers' SortedDict: per-call insert and get, batch export."""
import numpy as np
import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("BTree insert per call vs LLBTree", "test_btree_insert_per_call", "test_llbtree_insert_per_call", 1.5, 6),
    Ratio("BTree insert per call vs SortedDict", "test_btree_insert_per_call", "test_sorteddict_insert_per_call",
          5.0, 6),
    Ratio("BTree get per call vs LLBTree", "test_btree_get_per_call", "test_llbtree_get_per_call", 1.5, 6),
    Ratio("BTree range_to_numpy vs iterating SortedDict.irange", "test_btree_range_to_numpy",
          "test_sorteddict_irange", 10.0, 6),
    Ratio("BTree insert_many (batch) vs BTree insert per call", "test_btree_insert_many",
          "test_btree_insert_per_call", 1.0, 6),
]


@pytest.fixture(scope="module")
def keys():
    n = scaled(1_000_000)
    arr = np.random.default_rng(0).permutation(4 * n)[:n].astype(np.int64)
    return arr, arr.tolist()


def _fill(t, ks):
    for k in ks:
        t[k] = k
    return t


def _gets(get, ks):
    for k in ks:
        get(k)


@pytest.mark.benchmark(group="btree-insert")
def test_btree_insert_per_call(benchmark, items, keys):
    from logtide import BTree
    items(len(keys[1]))
    t = benchmark(lambda: _fill(BTree(), keys[1]))
    benchmark.extra_info["figures"] = {"bytes_per_entry": round(t.memory_bytes() / len(t), 2)}


@pytest.mark.benchmark(group="btree-insert")
def test_llbtree_insert_per_call(benchmark, items, keys):
    from BTrees.LLBTree import LLBTree
    items(len(keys[1]))
    benchmark(lambda: _fill(LLBTree(), keys[1]))


@pytest.mark.benchmark(group="btree-insert")
def test_sorteddict_insert_per_call(benchmark, items, keys):
    from sortedcontainers import SortedDict
    items(len(keys[1]))
    benchmark(lambda: _fill(SortedDict(), keys[1]))


@pytest.mark.benchmark(group="btree-insert")
def test_btree_insert_many(benchmark, items, keys):
    from logtide import BTree
    arr = keys[0]
    items(len(arr))

    def run():
        t = BTree()
        t[-1] = -1          # not empty: the batch goes through inserts, not bulk loading
        t.insert_many(arr, arr)
        return t
    benchmark(run)


@pytest.mark.benchmark(group="btree-get")
def test_btree_get_per_call(benchmark, items, keys):
    from logtide import BTree
    t = _fill(BTree(), keys[1])
    items(len(keys[1]))
    benchmark(_gets, t.get, keys[1])


@pytest.mark.benchmark(group="btree-get")
def test_llbtree_get_per_call(benchmark, items, keys):
    from BTrees.LLBTree import LLBTree
    t = _fill(LLBTree(), keys[1])
    items(len(keys[1]))
    benchmark(_gets, t.get, keys[1])


@pytest.mark.benchmark(group="btree-get")
def test_btree_get_many(benchmark, items, keys):
    from logtide import BTree
    t = _fill(BTree(), keys[1])
    items(len(keys[0]))
    vals, found = benchmark(t.get_many, keys[0])
    assert found.all()


def _bounds(arr):
    s = np.sort(arr)
    return int(s[len(s) // 4]), int(s[3 * len(s) // 4])


@pytest.mark.benchmark(group="btree-range")
def test_btree_range_to_numpy(benchmark, items, keys):
    from logtide import BTree
    t = BTree()
    t.insert_many(keys[0], keys[0])
    lo, hi = _bounds(keys[0])
    items(t.count_range(lo, hi))
    k, v = benchmark(t.range_to_numpy, lo, hi)
    assert len(k) == benchmark.extra_info["items"]


@pytest.mark.benchmark(group="btree-range")
def test_sorteddict_irange(benchmark, items, keys):
    from sortedcontainers import SortedDict
    d = SortedDict(zip(keys[1], keys[1]))
    lo, hi = _bounds(keys[0])
    items(len(list(d.irange(lo, hi, inclusive=(True, False)))))
    benchmark(lambda: list(d.irange(lo, hi, inclusive=(True, False))))
