"""The whole LogIndex (ring, tables, blooms, meta, reopen, RO, truncation) against a dict-of-lists model."""
import bisect
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from hypothesis_profiles import scaled

from logtide import LogIndex
from logtide.errors import LsnOrderError, ReadOnlyError

MAX = 2**64 - 1
TAGS = [(1663, 5, 16384 + r, f, b) for r in range(4) for f in (0, 2) for b in range(6)]


def _model_lsns(lists, tag, lo, hi):
    lst = lists.get(tag, [])
    return lst[bisect.bisect_left(lst, lo):bisect.bisect_right(lst, hi)]


class LogIndexMachine(RuleBasedStateMachine):
    """Random inserts (single, batched, records touching several pages), flushes, crashes with
    re-insert from replay_needed_from(), RO readers and truncation; every lookup checked."""

    @initialize(max_segments=st.sampled_from([1, 2, 3, 8]), ring=st.sampled_from([2, 3, 8, 32]), background=st.booleans())
    def setup(self, max_segments, ring, background):
        self.dir = Path(tempfile.mkdtemp(prefix="li-"))
        self.params = dict(max_segments=max_segments, ring_size=ring, background_flush=background)
        self.li = LogIndex.open(self.dir, **self.params)
        self.history = []      # (lsn, tag) in insertion order
        self.lists = {}
        self.lsn = 1
        self.floor = 0         # every LSN >= floor must survive truncation

    def teardown(self):
        try:
            self.li.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _record(self, lsn, tag):
        if self.lists.get(tag) and self.lists[tag][-1] == lsn:
            return
        self.history.append((lsn, tag))
        self.lists.setdefault(tag, []).append(lsn)

    @rule(tags=st.lists(st.sampled_from(range(len(TAGS))), min_size=1, max_size=4, unique=True),
          step=st.sampled_from([1, 1, 2, 7, 2**32]))
    def insert_record(self, tags, step):
        """One WAL record touching up to 4 pages: one LSN, several tags."""
        self.lsn += step
        for ti in tags:
            assert self.li.insert(TAGS[ti], self.lsn) is True  # a new (page, LSN) is always stored
            self._record(self.lsn, TAGS[ti])

    @rule(rows=st.lists(st.tuples(st.sampled_from(range(len(TAGS))), st.sampled_from([0, 1, 1, 3, 2**32])),
                        min_size=1, max_size=60))
    def insert_batch(self, rows):
        tags, lsns = [], []
        for ti, step in rows:
            self.lsn += step
            tags.append(TAGS[ti])
            lsns.append(self.lsn)
        self.li.insert_many(np.array(tags, np.uint32), np.array(lsns, np.uint64))
        for t, l in zip(tags, lsns):
            self._record(l, t)

    @rule()
    def older_lsn_is_refused(self):
        if self.lsn > self.li.max_saved_lsn + 1 and self.history:
            with pytest.raises(LsnOrderError):
                self.li.insert(TAGS[0], self.lsn - 1)

    @rule(include_active=st.booleans())
    def flush(self, include_active):
        self.li.flush(include_active=include_active)

    @rule(per_call=st.booleans())
    def crash_and_reinsert(self, per_call=False):
        """Drop the index without closing (unflushed memtables are lost), reopen, re-insert
        (in one batch, or per call: rows at or below the saved LSN take insert()'s slow path)."""
        if self.li._pool is not None:
            # a crash stops the flush thread too: here it ends first (a crash just after its commit)
            self.li._pool.shutdown(wait=True)
        self.li.store.close()
        self.li = LogIndex.open(self.dir, **self.params)
        start = self.li.replay_needed_from()
        redo = [(l, t) for l, t in self.history if l >= start]
        if per_call:
            for l, t in redo:
                stored = self.li.insert(t, l)
                assert stored or l == start, f"({t}, {l}) is above the saved LSN {start} but was not stored"
        elif redo:
            self.li.insert_many(np.array([t for _, t in redo], np.uint32), np.array([l for l, _ in redo], np.uint64))

    @rule()
    def clean_reopen(self):
        self.li.close()
        self.crash_and_reinsert()

    @rule(frac=st.floats(0, 1))
    def truncate(self, frac):
        if not self.history:
            return
        lsn = self.history[int(frac * (len(self.history) - 1))][0]
        self.li.truncate(lsn)
        self.floor = max(self.floor, lsn)

    @precondition(lambda self: self.history)
    @rule(frac=st.floats(0, 1))
    def ro_reader_agrees(self, frac):
        """An RO index opened on the directory sees exactly what the primary has saved."""
        ro = LogIndex.open(self.dir, mode="ro")
        saved = ro.max_saved_lsn
        with pytest.raises(ReadOnlyError):
            ro.flush()
        for tag in TAGS[::5]:
            got = ro.lsns(tag)
            want = [l for l in self.lists.get(tag, []) if l < saved]
            assert set(want) - set(got.tolist()) <= set(l for l in want if l < self.floor)
            assert set(got.tolist()) <= set(self.lists.get(tag, []))
        ro.close()

    @invariant()
    def lookups_match_model(self):
        if not hasattr(self, "li"):
            return
        hi_cut = self.history[len(self.history) // 2][0] if self.history else 0
        for tag in TAGS:
            for lo, hi in ((0, MAX), (hi_cut, MAX), (0, hi_cut)):
                got = self.li.lsns(tag, lo, hi)
                assert got.dtype == np.uint64
                g = got.tolist()
                assert g == sorted(set(g)), "ascending, each LSN once"
                want = _model_lsns(self.lists, tag, lo, hi)
                assert set(g) <= set(want), "never a wrong LSN"
                assert [x for x in want if x >= self.floor] == [x for x in g if x >= self.floor]
        # the batch form agrees with the per-call form
        offsets, found = self.li.lsns_many(np.array(TAGS, np.uint32), 0, MAX)
        for i, tag in enumerate(TAGS):
            assert found[offsets[i]:offsets[i + 1]].tolist() == self.li.lsns(tag).tolist()
        # the LSN-order walk: every surviving entry once, ascending
        walked = list(self.li.iter_lsn())
        lsns = [l for l, _ in walked]
        assert lsns == sorted(lsns)
        assert len(set(walked)) == len(walked)
        model = {(l, t) for l, t in self.history}
        assert {(l, tuple(t)) for l, t in walked} <= model
        assert {x for x in model if x[0] >= self.floor} <= {(l, tuple(t)) for l, t in walked}


TestLogIndexModel = LogIndexMachine.TestCase
TestLogIndexModel.settings = scaled(max_examples=60, stateful_step_count=40, deadline=None)


def test_ring_exhaustion_flushes_oldest_first(tmp_path, rng):
    li = LogIndex.open(tmp_path, max_segments=4, ring_size=2)
    tags = rng.integers(0, 1000, size=(200, 5)).astype(np.uint32)
    li.insert_many(tags, np.arange(1, 201, dtype=np.uint64))
    st = li.stats()
    # 2 memtables in the ring: everything but the last two was flushed, in table-id order
    assert st["meta"].max_table_id == st["memtables"][0][0] - 1 or st["memtables"][0][1] == "FLUSHED"
    assert [s for _, s in st["memtables"]][-1] == "ACTIVE"
    assert st["tables_flushed"] == st["meta"].max_table_id + 1
    li.close()


def test_record_split_across_memtables_is_reinserted_once(tmp_path):
    """A record whose pages straddle a memtable boundary: the saved half is skipped on re-insert."""
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    li.insert((1, 1, 1, 0, 1), 10)
    li.insert((1, 1, 1, 0, 2), 10)            # memtable 0 now full (2 heads)
    li.insert((1, 1, 1, 0, 3), 10)            # same record, next memtable
    li.flush()                                # saves memtable 0 only
    assert li.replay_needed_from() == 10
    li.store.close()
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    assert li.insert((1, 1, 1, 0, 1), 10) is False     # saved
    assert li.insert((1, 1, 1, 0, 2), 10) is False     # saved
    assert li.insert((1, 1, 1, 0, 3), 10) is True      # was lost with the active memtable
    for b in (1, 2, 3):
        assert li.lsns((1, 1, 1, 0, b)).tolist() == [10]
    assert [l for l, _ in li.iter_lsn()] == [10, 10, 10]
    li.close()


def test_prefix_change_starts_a_new_memtable(tmp_path):
    li = LogIndex.open(tmp_path)
    tag = (1663, 5, 1, 0, 0)
    lsns = [5, 6, (1 << 32) + 1, (3 << 32) + 9]
    for l in lsns:
        li.insert(tag, l)
    assert li.lsns(tag).tolist() == lsns
    assert len(li.stats()["memtables"]) == 3
    assert li.lsns(tag, 6, 1 << 33).tolist() == lsns[1:3]


def test_ro_follows_a_writing_primary(tmp_path, rng):
    primary = LogIndex.open(tmp_path, max_segments=3, ring_size=2)
    ro = LogIndex.open(tmp_path, mode="ro")
    tag = (1663, 5, 7, 0, 7)
    stream = []
    lsn = 0
    for round_ in range(5):
        for _ in range(100):
            lsn += 1
            t = tag if lsn % 7 == 0 else tuple(rng.integers(0, 1 << 20, 5).tolist())
            primary.insert(t, lsn)
            stream.append((t, lsn))
        primary.flush()
        # the RO index re-reads the meta file on lookup and sees each newly saved table
        want = [l for l in range(7, lsn + 1, 7) if l <= primary.max_saved_lsn]
        assert ro.lsns(tag).tolist() == want
    # an RO node ingesting WAL meta from its replay point answers like the primary, saved or not
    ro2 = LogIndex.open(tmp_path, mode="ro", max_segments=3, ring_size=2)
    first_id = ro2._next_table_id
    start = ro2.replay_needed_from()
    assert 0 < start <= lsn
    for t, l in stream:
        if l >= start:
            ro2.insert(t, l)
    assert ro2.lsns(tag).tolist() == list(range(7, lsn + 1, 7)) == primary.lsns(tag).tolist()
    # the primary keeps writing and saving; the RO node keeps ingesting and reuses saved memtables
    for _ in range(300):
        lsn += 1
        t = tag if lsn % 7 == 0 else tuple(rng.integers(0, 1 << 20, 5).tolist())
        primary.insert(t, lsn)
        ro2.insert(t, lsn)
    primary.flush()
    assert ro2.lsns(tag).tolist() == list(range(7, lsn + 1, 7)) == primary.lsns(tag).tolist()
    assert [x for x in ro2.iter_lsn(start)] == [x for x in primary.iter_lsn(start)]
    ro2.refresh()
    saved = primary.meta.max_table_id
    states = ro2.stats()["memtables"]
    assert states and all(s == "FLUSHED" for tid, s in states if tid <= saved)
    # the RO node went through many memtables with a ring of 2: it reused the ones the primary saved
    assert len(ro2.ring) == 2 and ro2._next_table_id - first_id > 10
    with pytest.raises(ReadOnlyError):
        ro2.truncate(10)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    primary.close()
    ro.close()
    ro2.close()


def test_open_ro_without_directory_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError):
        LogIndex.open(tmp_path / "missing", mode="ro")
    with pytest.raises(ValueError):
        LogIndex.open(tmp_path, mode="rw")


def test_bloom_probe_sequence_matches_bloom4k(rng):
    """The bit-sliced lookup probes exactly the bits Bloom4K sets (docs/bloom4k.md)."""
    from logtide import Bloom4K
    from logtide._ext.memtable import bloom_test_many
    members = rng.integers(0, 2**32, size=(3000, 5), dtype=np.uint64).astype(np.uint32)
    others = rng.integers(0, 2**32, size=(20000, 5), dtype=np.uint64).astype(np.uint32)
    b = Bloom4K(expected_elements=4095)
    b.add_many(members)
    bits = np.frombuffer(b.to_bytes(), np.uint8, 4064, 32).copy()
    assert bloom_test_many(members, bits, b.k).all()
    assert np.array_equal(bloom_test_many(others, bits, b.k), b.contains_many(others))


def test_lookup_with_tiny_table_cache(tmp_path):
    """More candidate tables than the cache holds: lookups stay exact."""
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    tag = (1, 2, 3, 0, 4)
    for l in range(1, 400):
        li.insert(tag if l % 3 == 0 else (1, 2, 3, 0, 1000 + l), l)
    li.flush(include_active=True)
    li.close()
    ro = LogIndex.open(tmp_path, mode="ro", table_cache=1)
    assert ro.lsns(tag).tolist() == list(range(3, 400, 3))
    offsets, found = ro.lsns_many(np.array([tag, (1, 2, 3, 0, 1001)], np.uint32))
    assert found[:offsets[1]].tolist() == list(range(3, 400, 3)) and found[offsets[1]:].tolist() == [1]


def test_bad_input_is_refused_without_damage(tmp_path):
    li = LogIndex.open(tmp_path)
    li.insert((1, 2, 3, 0, 4), 10)
    for bad_tag in ("1/2/3/0/4", (1, 2, 3), (1, 2, 3, 0, -1), (1, 2, 3, 0, 2**32)):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            li.insert(bad_tag, 11)
    for bad_lsn in (-1, 2**64):
        with pytest.raises(ValueError):
            li.insert((1, 2, 3, 0, 4), bad_lsn)
    with pytest.raises(ValueError):
        li.insert_many(np.zeros((2, 5), np.uint32), np.array([-5, 3]))
    with pytest.raises(ValueError):
        li.insert_many(np.zeros((2, 4), np.uint32), np.array([11, 12], np.uint64))
    with pytest.raises(LsnOrderError, match="row 1"):
        li.insert_many(np.zeros((2, 5), np.uint32), np.array([20, 19], np.uint64))
    assert li.lsns((1, 2, 3, 0, 4)).tolist() == [10]
    li.insert((1, 2, 3, 0, 4), 11)
    assert li.lsns((1, 2, 3, 0, 4)).tolist() == [10, 11]
    li.close()
    with pytest.raises(Exception, match="closed"):
        li.lsns((1, 2, 3, 0, 4))


# a tag spelled with a field that is not an integer: once, 1.5 became page 1 on insert (list and
# array spellings) and on insert_many (every spelling), while lookups refused it
_NOT_INTEGER_TAGS = [
    pytest.param([1.5, 2, 3, 0, 4], id="list-float"),
    pytest.param((1.5, 2, 3, 0, 4), id="tuple-float"),
    pytest.param(["1", 2, 3, 0, 4], id="list-str"),
    pytest.param(np.array([1, 2, 3, 0, 4], np.float64), id="array-float"),
    pytest.param((np.float32(1.0), 2, 3, 0, 4), id="numpy-float-field"),
]


@pytest.mark.parametrize("bad", _NOT_INTEGER_TAGS)
def test_a_tag_field_that_is_not_an_integer_is_refused_everywhere(tmp_path, bad):
    li = LogIndex.open(tmp_path)
    try:
        li.insert((1, 2, 3, 0, 4), 10)
        with pytest.raises(TypeError):
            li.insert(bad, 11)
        with pytest.raises(TypeError):
            li.lsns(bad)
        with pytest.raises((TypeError, ValueError)):   # ValueError: a float (n, 5) array
            li.insert_many([bad], [12])
        with pytest.raises((TypeError, ValueError)):
            li.lsns_many([bad])
        assert li.stats()["inserted"] == 1, "a refused insert stores nothing"
        assert li.lsns((1, 2, 3, 0, 4)).tolist() == [10]
        assert li.lsns((1, 2, 3, 0, 1)).tolist() == []
        li.insert_many([(1, 2, 3, 0, 4), [1, 2, 3, 0, 5]], [13, 13])   # integer spellings still go in
        assert li.lsns((1, 2, 3, 0, 4)).tolist() == [10, 13]
    finally:
        li.close()


def test_tag_rows_out_of_range_or_ragged_are_value_errors():
    from logtide.pagetag import tag_array
    for rows in ([(2**32, 0, 0, 0, 0)], [(2**64 - 1, 0, 0, 0, 0)], [(-1, 0, 0, 0, 0), (2**63, 0, 0, 0, 0)],
                 [(1, 2, 3)], [(1, 2, 3, 4, 5), (1, 2)]):
        with pytest.raises(ValueError):
            tag_array(rows)
    assert tag_array([(True, 0, 0, 0, 7)]).tolist() == [[1, 0, 0, 0, 7]]
    assert tag_array([[np.uint32(4)] * 5]).dtype == np.uint32


@pytest.mark.parametrize("bad", [20.5, float("nan"), True, "5", None, np.float64(20.0), -1, 2**64])
def test_an_lsn_argument_that_is_not_a_u64_is_refused_before_anything_changes(tmp_path, bad):
    """Bounds, truncation points and iteration starts: once, lsns(T, 20.5) returned LSN 20,
    insert(T, True) indexed LSN 1 and truncate(nan) deleted every table file but the last."""
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    try:
        tag = (1, 2, 3, 0, 4)
        for lsn in range(1, 400):
            li.insert(tag if lsn % 10 == 0 else (1, 2, 3, 0, 1000 + lsn), lsn)
        li.flush(include_active=True)
        files = sorted(p.name for p in tmp_path.iterdir())
        inserted = li.stats()["inserted"]
        refusals = [lambda: li.insert(tag, bad), lambda: li.truncate(bad), lambda: li.iter_lsn(bad),
                    lambda: li.iter_lsn_arrays(bad), lambda: li.lsns_many([tag], bad),
                    lambda: li.lsns(tag, bad), lambda: li.lsns(tag, 0, bad)]
        for call in refusals:
            with pytest.raises(ValueError):
                call()
        assert sorted(p.name for p in tmp_path.iterdir()) == files
        assert li.stats()["inserted"] == inserted
        assert li.lsns(tag).tolist() == list(range(10, 400, 10))
        assert li.lsns(tag, np.uint64(20), np.int64(40)).tolist() == [20, 30, 40]
        assert [lsn for lsn, _t in li.iter_lsn(np.uint64(395))] == [395, 396, 397, 398, 399]
    finally:
        li.close()
