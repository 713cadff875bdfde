"""Memtable (PolarDB's fixed arrays) against a dict-of-lists reference model."""
import bisect

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.errors import CorruptBlockError, LsnOrderError
from logtide._ext import memtable as mt
from logtide._ext.memtable import Memtable

TAGS = [(1663, 5, 16384 + r, f, b) for r in range(3) for f in (0, 1) for b in range(4)]


class Model:
    """What a memtable must hold: per-tag LSN lists, the insertion order, and segment use."""

    def __init__(self, limit):
        self.limit = limit
        self.lists = {}
        self.order = []
        self.used = 0
        self.prefix = None
        self.max = 0

    def segs_needed(self, tag, lsn):
        c = len(self.lists.get(tag, []))
        if c == 0:
            return 1
        return 1 if c == 2 or (c > 2 and (c - 2) % 10 == 0) else 0

    def insert(self, tag, lsn):
        if self.order and lsn < self.max:
            return "order"
        if self.order and lsn >> 32 != self.prefix:
            return mt.PREFIX_CHANGE
        if self.lists.get(tag) and self.lists[tag][-1] == lsn:
            return mt.DUPLICATE
        need = self.segs_needed(tag, lsn)
        if self.used + need > self.limit:
            return mt.FULL
        self.used += need
        self.lists.setdefault(tag, []).append(lsn)
        self.order.append((lsn, tag))
        self.prefix = lsn >> 32
        self.max = lsn
        return mt.INSERTED

    def lsns(self, tag, lo, hi):
        lst = self.lists.get(tag, [])
        return lst[bisect.bisect_left(lst, lo):bisect.bisect_right(lst, hi)]


ops = st.lists(st.tuples(st.sampled_from(range(len(TAGS))), st.sampled_from([0, 0, 1, 1, 1, 3, 2**32, -1])),
               max_size=250)


def _apply(m, model, seq, start=5):
    lsn = start
    for ti, step in seq:
        lsn = max(0, lsn + step)
        tag = TAGS[ti]
        want = model.insert(tag, lsn)
        if want == "order":
            with pytest.raises(LsnOrderError):
                m.insert(tag, lsn)
            lsn = model.max
        else:
            assert m.insert(tag, lsn) == want, (tag, lsn)
            if want in (mt.FULL, mt.PREFIX_CHANGE):
                lsn = model.max
    return lsn


def _check(m, model, lo_hi):
    assert len(m) == len(model.order)
    assert m.used_segments == model.used
    for tag in TAGS:
        for lo, hi in lo_hi:
            got = m.lsns(tag, lo, hi)
            assert got.dtype == np.uint64
            assert got.tolist() == model.lsns(tag, lo, hi)
        assert (tag in m) == (tag in model.lists)
    assert [(l, tuple(t)) for l, t in m.iter_order()] == model.order
    if model.order:
        mid = model.order[len(model.order) // 2][0]
        assert [(l, tuple(t)) for l, t in m.iter_order(mid)] == [o for o in model.order if o[0] >= mid]
        lsns, tags = m.order_arrays(mid)
        assert list(zip(lsns.tolist(), map(tuple, tags.tolist()))) == [o for o in model.order if o[0] >= mid]
        assert m.min_lsn == model.order[0][0] and m.max_lsn == model.order[-1][0]
    assert sorted(map(tuple, m.tags().tolist())) == sorted(model.lists)


@scaled(max_examples=150, deadline=None)
@given(seq=ops, limit=st.sampled_from([1, 2, 3, 7, 20, 4095]))
def test_memtable_matches_model(seq, limit):
    m = Memtable(table_id=3, max_segments=limit)
    model = Model(limit)
    _apply(m, model, seq)
    ranges = [(0, 2**64 - 1), (10, 40), (2**32, 2**33)]
    _check(m, model, ranges)
    # the serialised image holds the same index
    again = Memtable.from_bytes(m.to_bytes())
    assert again.table_id == 3 and again.max_segments == limit
    _check(again, model, ranges)


@scaled(max_examples=80, deadline=None)
@given(seq=ops, limit=st.sampled_from([2, 5, 30]))
def test_insert_many_equals_per_call(seq, limit):
    lsn, tags, lsns = 5, [], []
    for ti, step in seq:
        lsn += max(step, 0)
        tags.append(TAGS[ti])
        lsns.append(lsn)
    a = Memtable(max_segments=limit)
    model = Model(limit)
    stop, status = len(tags), mt.INSERTED
    for i, (t, l) in enumerate(zip(tags, lsns)):
        s = model.insert(t, l)
        if s in (mt.FULL, mt.PREFIX_CHANGE):
            stop, status = i, s
            break
    got = a.insert_many(np.array(tags, dtype=np.uint32).reshape(-1, 5), np.array(lsns, dtype=np.uint64))
    assert got == (stop, status)
    _check(a, model, [(0, 2**64 - 1)])
    offsets, flat = a.lsns_many(np.array(TAGS, dtype=np.uint32))
    for i, tag in enumerate(TAGS):
        assert flat[offsets[i]:offsets[i + 1]].tolist() == model.lsns(tag, 0, 2**64 - 1)


def test_full_capacity_and_exact_size():
    m = Memtable()
    assert m.nbytes == mt.NBYTES == 8 * 3 + 4 * 2 + 2 * 2 + 4 + 2048 * 2 + 4096 * 48 + 40960 * 2 == 282664
    # one hot page fills the memtable: 2 LSNs in the head, then 10 per segment
    lsn = 0
    while True:
        lsn += 1
        s = m.insert((1, 2, 3, 0, 0), lsn)
        if s == mt.FULL:
            break
    assert len(m) == 2 + 10 * 4094 == m.lsns((1, 2, 3, 0, 0)).size
    assert m.free_segments == 0
    again = Memtable.from_bytes(m.to_bytes())
    assert np.array_equal(again.lsns((1, 2, 3, 0, 0), 100, 200), np.arange(100, 201, dtype=np.uint64))


def test_prefix_change_and_order_errors():
    m = Memtable()
    assert m.insert((1, 1, 1, 0, 1), (7 << 32) + 5) == mt.INSERTED
    assert m.prefix == 7
    assert m.insert((1, 1, 1, 0, 1), (8 << 32) + 1) == mt.PREFIX_CHANGE
    with pytest.raises(LsnOrderError):
        m.insert((1, 1, 1, 0, 2), (7 << 32) + 4)
    with pytest.raises(LsnOrderError, match="row 1"):
        m.insert_many(np.array([[1, 1, 1, 0, 3], [1, 1, 1, 0, 4]], np.uint32), np.array([(7 << 32) + 9, 3], np.uint64))
    assert m.lsns((1, 1, 1, 0, 3)).tolist() == [(7 << 32) + 9]  # rows before the bad one stay
    with pytest.raises(TypeError):
        m.insert("1/1/1/0/1", 10)
    with pytest.raises(ValueError):
        m.insert_many(np.zeros((2, 5), np.uint32), np.zeros(3, np.uint64))


def test_corrupt_images_are_rejected(rng):
    m = Memtable(table_id=9)
    tags = rng.integers(0, 50, size=(300, 5)).astype(np.uint32)
    m.insert_many(tags, np.arange(1, 301, dtype=np.uint64))
    raw = m.to_bytes()
    for pos in list(range(0, 64)) + rng.integers(0, len(raw), 200).tolist():
        bad = bytearray(raw)
        bad[pos] ^= 0x10
        with pytest.raises(CorruptBlockError):
            Memtable.from_bytes(bytes(bad))
    for cut in (0, 10, len(raw) // 2, len(raw) - 1):
        with pytest.raises(CorruptBlockError):
            Memtable.from_bytes(raw[:cut])
    with pytest.raises(CorruptBlockError):
        Memtable.from_bytes(raw + b"\0")


@scaled(max_examples=60, deadline=None)
@given(dirty=ops, seq=ops, chunk=st.integers(1, 40), limit=st.sampled_from([3, 30, 4095]))
def test_reset_memtable_equals_a_fresh_one(dirty, seq, chunk, limit):
    """A memtable reused after reset() (its old segments left in memory) holds what a fresh one
    holds, and serialises to the same bytes, for rows fed in batches from varying starts."""
    used = Memtable(table_id=1, max_segments=limit)
    _apply(used, Model(limit), dirty)
    used.reset(9)
    fresh = Memtable(table_id=9, max_segments=limit)
    lsn, tags, lsns = 5, [], []
    for ti, step in seq:
        lsn += max(step, 0)
        tags.append(TAGS[ti])
        lsns.append(lsn)
    t = np.array(tags, dtype=np.uint32).reshape(-1, 5)
    l = np.array(lsns, dtype=np.uint64)
    i = j = 0
    while i < len(t):
        i2, s = used.insert_many(t, l, i) if i + chunk >= len(t) else used.insert_many(t[:i + chunk], l[:i + chunk], i)
        if i2 == i:
            break
        i = i2
    j, _ = fresh.insert_many(t, l)
    assert i == j
    assert used.to_bytes() == fresh.to_bytes()


@scaled(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tables=st.integers(1, 200))
def test_slices_add_matches_a_numpy_reference(seed, tables):
    """Bloom bits set into the bit-sliced matrix land where unpacking them with numpy puts them."""
    rng = np.random.default_rng(seed)
    nbits = 4064 * 8
    got = np.zeros((nbits, (tables + 63) // 64), np.uint64)
    want = np.zeros_like(got)
    for j in range(tables):
        density = rng.choice([0.0, 0.02, 0.5, 1.0])
        bits = np.packbits(rng.random(nbits) < density, bitorder="little")
        mt.slices_add(got, bits, j)
        want[:, j >> 6] |= np.unpackbits(bits, bitorder="little").astype(np.uint64) << np.uint64(j & 63)
    assert (got == want).all()
    with pytest.raises(ValueError):
        mt.slices_add(got, np.zeros(10, np.uint8), 0)
