"""BTree: errors on bad input, object references, concurrent snapshots, memory per entry."""
import gc
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

from logtide import BTree, LogtideError, ReadOnlySnapshotError


def test_bad_construction_and_keys():
    with pytest.raises(ValueError):
        BTree(width=4)
    with pytest.raises(ValueError):
        BTree(values="float")
    t = BTree(width=3)
    with pytest.raises(TypeError):
        t[(1, 2)] = 5             # a key of a width-3 tree has 3 fields
    with pytest.raises(TypeError):
        t[1] = 5
    with pytest.raises(TypeError):
        t[(1, 2, "x")] = 5
    with pytest.raises(OverflowError):
        t[(1, 2, 2**63)] = 5
    with pytest.raises(TypeError):
        t.insert_many(np.zeros((4, 2), dtype=np.int64), np.zeros(4))
    with pytest.raises(ValueError):
        t.insert_many(np.zeros((4, 3), dtype=np.int64), np.zeros(3, dtype=np.int64))
    one = BTree()
    with pytest.raises(TypeError):
        one["a"] = 1
    with pytest.raises(TypeError):
        one[1] = "not an int"
    with pytest.raises(KeyError):
        one[7]
    with pytest.raises(KeyError):
        del one[7]
    assert len(t) == 0 and len(one) == 0


def test_a_key_or_value_that_is_not_an_integer_is_refused_never_truncated():
    """Once, t[(1.7, 0, -5)] = 7 overwrote key (1, 0, -5), delete((1.2, 0, -5)) removed it, and the
    batch forms took floats, "30", NaN and uint64 2**63 (wrapped to INT64_MIN) as keys and values."""
    t = BTree(width=3)
    t[(1, 0, -5)] = 42
    one = BTree()
    one[np.int64(3)] = np.uint8(30)                     # numpy integers are integers
    for call in (lambda: t.__setitem__((1.7, 0, -5), 7), lambda: t.delete((1.2, 0, -5)),
                 lambda: t.insert((1, 0, 2.0), 1), lambda: t.get((np.float64(1.0), 0, -5)),
                 lambda: t.__setitem__((2, 0, 0), 1.5), lambda: one.__setitem__(2.5, 1),
                 lambda: one.get_many(np.array([3]), default=0.5), lambda: BTree(width=1.5),
                 lambda: BTree(width=True)):
        with pytest.raises(TypeError):
            call()
    bad_batches = [(np.array([[1.5, 0, 0]]), np.array([1])), ([["30", 0, 0]], [1]),
                   (np.array([[np.nan, 0, 0]]), np.array([1])), (np.array([[1, 0, 0]]), np.array([1.5]))]
    for keys, values in bad_batches:
        for call in (lambda: t.insert_many(keys, values), lambda: t.bulk_load(keys, values)):
            with pytest.raises(TypeError):
                call()
    with pytest.raises(OverflowError):
        t.insert_many(np.array([[2**63, 0, 0]], dtype=np.uint64), np.array([1]))
    with pytest.raises(OverflowError):
        t.insert_many(np.array([[1, 0, 0]]), np.array([2**63], dtype=np.uint64))
    with pytest.raises(OverflowError):
        one.insert_many([2**64], [1])
    assert dict(t.items()) == {(1, 0, -5): 42} and dict(one.items()) == {3: 30}
    t.insert_many(np.array([[1, 0, 0]], dtype=np.uint32), np.array([True]))
    assert dict(t.items()) == {(1, 0, -5): 42, (1, 0, 0): 1}


@pytest.mark.parametrize("width", [1, 2])
def test_insert_many_told_sorted_keys_that_are_not_still_builds_a_valid_tree(width):
    """assume_sorted=True on an empty tree bulk-loaded the batch as given: unsorted keys made a tree
    that lost keys (get(1) was None) and failed check()."""
    keys = np.array([3, 1, 2, 1]) if width == 1 else np.array([[3, 0], [1, 5], [2, 0], [1, 5]])
    t = BTree(width=width)
    assert t.insert_many(keys, np.array([30, 10, 20, 11]), assume_sorted=True) == 3
    t.check()
    want = {3: 30, 1: 11, 2: 20} if width == 1 else {(3, 0): 30, (1, 5): 11, (2, 0): 20}
    assert dict(t.items()) == want
    t.insert_many(keys[:2], np.array([33, 12]), assume_sorted=True)     # a non-empty tree: per-key inserts
    t.check()
    assert t.get(keys[0] if width == 1 else tuple(keys[0])) == 33


def test_snapshot_is_read_only_and_typed():
    t = BTree()
    t[1] = 1
    s = t.snapshot()
    for op in (lambda: s.insert(2, 2), lambda: s.__setitem__(2, 2), lambda: s.delete(1),
               lambda: s.insert_many(np.arange(3), np.arange(3)), lambda: s.clear(),
               lambda: s.bulk_load(np.arange(3), np.arange(3)), lambda: s.delete_many(np.arange(3))):
        with pytest.raises(ReadOnlySnapshotError):
            op()
    assert issubclass(ReadOnlySnapshotError, LogtideError)
    assert s.readonly and not t.readonly and dict(s.items()) == {1: 1}


def test_prefix_bounds_on_composite_keys():
    t = BTree(width=3)
    for b in range(5):
        for off in range(100):
            t[(b, off, -off)] = b * 1000 + off
    keys, vals = t.range_to_numpy((2,), (3,))
    assert len(keys) == 100 and (keys[:, 0] == 2).all() and vals.tolist() == [2000 + i for i in range(100)]
    assert t.floor((2, 50, 0)) == ((2, 50, -50), 2050)
    assert t.ceiling((2, 50, -49)) == ((2, 51, -51), 2051)
    assert t.count_range((1,), (4,)) == 300


def test_object_values_are_released():
    class V:
        pass
    objs = [V() for _ in range(3000)]
    refs = [weakref.ref(o) for o in objs]
    t = BTree(values="object")
    for i, o in enumerate(objs[:1000]):
        t[i] = o
    arr = np.empty(2000, dtype=object)
    arr[:] = objs[1000:]
    t.insert_many(np.arange(1000, 3000), arr)
    snap = t.snapshot()
    t.delete_many(np.arange(0, 3000, 2))       # copy-on-write: the snapshot still holds them all
    base = sys.getrefcount(objs[1])
    del objs, arr, o
    gc.collect()
    assert all(r() is not None for r in refs)
    del snap
    gc.collect()
    assert all((r() is None) == (i % 2 == 0) for i, r in enumerate(refs))
    assert base >= 2
    t.clear()
    gc.collect()
    assert all(r() is None for r in refs)


def test_snapshots_stay_stable_under_a_concurrent_batch_writer():
    t = BTree()
    t.insert_many(np.arange(0, 200_000, 2), np.arange(0, 200_000, 2))
    errors = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                s = t.snapshot()
                n = len(s)
                k, v = s.range_to_numpy()
                assert len(k) == n and (k == v).all() and (np.diff(k) > 0).all()
                s.check()
        except Exception as exc:  # surfaced to the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    rng = np.random.default_rng(3)
    for _ in range(30):
        ks = rng.integers(0, 400_000, 20_000)
        t.insert_many(ks, ks)                      # releases the GIL while it writes
        t.delete_many(rng.integers(0, 400_000, 10_000))
    stop.set()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    t.check()


def test_memory_per_int64_entry_at_one_million():
    n = 1_000_000
    keys = np.random.default_rng(0).permutation(4 * n)[:n].astype(np.int64)
    tracemalloc.start()
    try:
        t = BTree()
        for k in keys.tolist():
            t[k] = k
        traced = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    per_entry = t.memory_bytes() / n
    # the nodes come from PyMem_Raw*, which tracemalloc sees: the two counts agree
    assert abs(traced - t.memory_bytes()) < 0.01 * traced
    assert per_entry <= 24, per_entry
    bulk = BTree()
    bulk.bulk_load(keys, keys)
    assert bulk.memory_bytes() / n <= per_entry
    print(f"\nBTree int64->int64 at 1M: {per_entry:.2f} bytes/entry (per-call random inserts), "
          f"{bulk.memory_bytes() / n:.2f} (bulk_load), depth {t.depth()}")


from hypothesis import given, strategies as hst  # noqa: E402
from hypothesis_profiles import scaled  # noqa: E402


@scaled(max_examples=80, deadline=None)
@given(n0=hst.integers(0, 4000), m=hst.integers(0, 1200), span=hst.sampled_from([600, 5000, 1 << 40]),
       width=hst.sampled_from([1, 2]), seed=hst.integers(0, 2**32 - 1))
def test_insert_many_on_both_sides_of_the_merge_threshold(n0, m, span, width, seed):
    """A batch into a filled int64 tree, below and above an eighth of its size (inserted one by one,
    or merged and rebuilt): the same content as a dict, the same count of new keys, a snapshot
    taken before unchanged, and a valid structure; get_many then agrees with the dict."""
    rng = np.random.default_rng(seed)
    shape = (n0,) if width == 1 else (n0, width)
    t = BTree(width=width)
    model = {}
    base = rng.integers(-span, span, size=shape)
    for k, v in zip(base.tolist(), rng.integers(-2**40, 2**40, n0).tolist()):
        k = tuple(k) if width > 1 else k
        t[k] = v
        model[k] = v
    snap, frozen = t.snapshot(), sorted(model.items())
    keys = rng.integers(-span, span, size=(m,) if width == 1 else (m, width))
    vals = rng.integers(-2**40, 2**40, m)
    added = t.insert_many(keys, vals)
    batch = [(tuple(k) if width > 1 else k, v) for k, v in zip(keys.tolist(), vals.tolist())]
    assert added == len({k for k, _ in batch} - set(model))
    model.update(batch)                         # the last value of a repeated key wins
    assert list(t.range()) == sorted(model.items())
    assert list(snap.range()) == frozen
    t.check()
    # get_many walks its probes down in groups: present and absent keys, more than one group
    probes = rng.integers(-span, span, size=(200,) if width == 1 else (200, width))
    got, found = t.get_many(probes, default=-7)
    for k, v, f in zip(probes.tolist(), got.tolist(), found.tolist()):
        k = tuple(k) if width > 1 else k
        assert (f, v) == ((True, model[k]) if k in model else (False, -7))
