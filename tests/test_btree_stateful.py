"""BTree against sortedcontainers.SortedDict: random inserts, deletes, batches, ranges and snapshots.

Snapshots taken mid-stream are kept with a frozen copy of the model and must never change.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from hypothesis_profiles import scaled
from sortedcontainers import SortedDict

from logtide import BTree, ReadOnlySnapshotError

SPAN = 400  # a small key space: many overwrites and deletes of present keys, many splits and merges


def _machine(width: int, objvals: bool, simd: bool = True):
    field = st.integers(-SPAN, SPAN) if width == 1 else st.integers(-6, 6)
    key_st = field if width == 1 else st.tuples(*[field] * width)
    val_st = st.integers(-2**63, 2**63 - 1)
    batch_st = st.lists(st.tuples(key_st, val_st), max_size=300)

    def wrap(v):
        return ("obj", v) if objvals else v

    def arr(keys):
        if width == 1:
            return np.array(keys, dtype=np.int64)
        return np.array(keys, dtype=np.int64).reshape(-1, width)

    def vals_arr(vals):
        if objvals:
            out = np.empty(len(vals), dtype=object)
            for i, v in enumerate(vals):
                out[i] = wrap(v)
            return out
        return np.array(vals, dtype=np.int64)

    class Machine(RuleBasedStateMachine):
        @initialize()
        def init(self):
            from logtide._ext.btree import _simd
            self.simd_was = _simd()
            _simd(simd)           # False: the branch-free binary search instead of the AVX2 scan
            self.tree = BTree(width=width, values="object" if objvals else "int64")
            self.model = SortedDict()
            self.snaps = []

        @rule(k=key_st, v=val_st)
        def insert(self, k, v):
            new = self.tree.insert(k, wrap(v))
            assert new == (k not in self.model)
            self.model[k] = wrap(v)

        @rule(k=key_st, v=val_st)
        def setitem(self, k, v):
            self.tree[k] = wrap(v)
            self.model[k] = wrap(v)

        @rule(k=key_st)
        def delete(self, k):
            assert self.tree.delete(k) == (k in self.model)
            self.model.pop(k, None)

        @rule(k=key_st)
        def get(self, k):
            assert self.tree.get(k, "missing") == self.model.get(k, "missing")
            assert (k in self.tree) == (k in self.model)

        @rule(batch=batch_st, presorted=st.booleans())
        def insert_many(self, batch, presorted):
            if presorted:  # the caller's promise: sorted, no repeats
                d = dict(batch)
                batch = sorted(d.items())
            keys = [k for k, _ in batch]
            new = self.tree.insert_many(arr(keys), vals_arr([v for _, v in batch]), assume_sorted=presorted)
            assert new == len(set(keys) - set(self.model))
            for k, v in batch:
                self.model[k] = wrap(v)

        @rule(seed=st.integers(0, 2**32 - 1), n=st.integers(500, 5000))
        def big_insert(self, seed, n):
            # wide keys: enough entries for inner nodes to split, and for sorted runs to append
            rng = np.random.default_rng(seed)
            raw = rng.integers(-30 * SPAN, 30 * SPAN, size=(n, width)) if width == 1 else \
                rng.integers(-40, 40, size=(n, width))
            if seed % 3 == 0:
                raw = np.sort(raw, axis=0)
            keys = [int(r[0]) for r in raw] if width == 1 else [tuple(int(x) for x in r) for r in raw]
            vals = rng.integers(-2**40, 2**40, size=n).tolist()
            if seed % 2:
                self.tree.insert_many(arr(keys), vals_arr(vals))
            else:
                for k, v in zip(keys, vals):
                    self.tree[k] = wrap(v)
            for k, v in zip(keys, vals):
                self.model[k] = wrap(v)

        @rule(a=st.integers(0, 1000), b=st.integers(0, 1000))
        def delete_span(self, a, b):
            # remove a contiguous run of present keys: leaves empty out and merge, inner nodes shrink
            if not self.model:
                return
            lo, hi = sorted((a * len(self.model) // 1000, b * len(self.model) // 1000))
            doomed = list(self.model.keys()[lo:hi])
            if not doomed:
                return
            assert self.tree.delete_many(arr(doomed)) == len(doomed)
            for k in doomed:
                del self.model[k]

        @rule(keys=st.lists(key_st, max_size=200))
        def delete_many(self, keys):
            # the model's view of present keys, counted once each
            expect = len(set(keys) & set(self.model))
            assert self.tree.delete_many(arr(keys)) == expect
            for k in keys:
                self.model.pop(k, None)

        @rule(keys=st.lists(key_st, max_size=100))
        def get_many(self, keys):
            vals, found = self.tree.get_many(arr(keys))
            assert found.tolist() == [k in self.model for k in keys]
            for k, v, f in zip(keys, vals, found):
                if f:
                    assert v == self.model[k]

        @rule(batch=batch_st)
        def bulk_load(self, batch):
            self.tree.bulk_load(arr([k for k, _ in batch]), vals_arr([v for _, v in batch]))
            self.model = SortedDict()
            for k, v in batch:
                self.model[k] = wrap(v)

        @rule()
        def snapshot(self):
            self.snaps.append((self.tree.snapshot(), list(self.model.items())))
            if len(self.snaps) > 4:
                self.snaps.pop(0)

        @rule(lo=st.none() | key_st, hi=st.none() | key_st)
        def ranges(self, lo, hi):
            exp = [(k, self.model[k]) for k in self.model.irange(lo, hi, inclusive=(True, False))]
            assert list(self.tree.range(lo, hi)) == exp
            ks, vs = self.tree.range_to_numpy(lo, hi)
            if width == 1:
                assert ks.tolist() == [k for k, _ in exp]
            else:
                assert [tuple(r) for r in ks.tolist()] == [k for k, _ in exp]
            assert list(vs) == [v for _, v in exp]
            assert self.tree.count_range(lo, hi) == len(exp)

        @rule(k=key_st)
        def floor_ceiling(self, k):
            i = self.model.bisect_right(k)
            exp_floor = self.model.peekitem(i - 1) if i > 0 else None
            j = self.model.bisect_left(k)
            exp_ceil = self.model.peekitem(j) if j < len(self.model) else None
            exp_lower = self.model.peekitem(j - 1) if j > 0 else None
            assert self.tree.floor(k) == exp_floor
            assert self.tree.ceiling(k) == exp_ceil
            assert self.tree.lower(k) == exp_lower

        @rule()
        def snapshot_is_read_only(self):
            if self.snaps:
                with pytest.raises(ReadOnlySnapshotError):
                    self.snaps[-1][0].insert(0 if width == 1 else (0,) * width, wrap(1))

        def teardown(self):
            from logtide._ext.btree import _simd
            _simd(self.simd_was)

        @invariant()
        def same_size(self):
            assert len(self.tree) == len(self.model)

        @invariant()
        def snapshots_unchanged(self):
            for snap, frozen in self.snaps:
                assert len(snap) == len(frozen)
                assert list(snap.range()) == frozen

        @invariant()
        def structure(self):
            self.tree.check()
            assert self.tree.first() == (self.model.peekitem(0) if self.model else None)
            assert self.tree.last() == (self.model.peekitem(-1) if self.model else None)

    return Machine


SETTINGS = scaled(max_examples=60, stateful_step_count=40, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TestBTreeInt64 = _machine(1, False).TestCase
TestBTreeInt64.settings = SETTINGS
TestBTreeComposite3Objects = _machine(3, True).TestCase
TestBTreeComposite3Objects.settings = SETTINGS
TestBTreeComposite2Int64 = _machine(2, False).TestCase
TestBTreeComposite2Int64.settings = SETTINGS
TestBTreeInt64BinarySearch = _machine(1, False, simd=False).TestCase
TestBTreeInt64BinarySearch.settings = SETTINGS
