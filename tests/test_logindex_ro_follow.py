"""An RO LogIndex following a primary on the same directory (issue 5's bug: skipped LSNs).

Both are fed the same (tag, lsn) stream, each at its own pace, row by row or in batches that span
several memtables (as the primary's group commit and the RO's WAL-meta batches do): the primary saves
tables at various points and truncates, the RO re-reads the meta file, is behind the primary's flushes
(its memtable still live for LSNs the primary saved), ahead of them, or reopened, and the primary is
replaced by a new one (a promotion: it re-inserts from replay_needed_from()). Every RO lookup at
max_lsn <= the RO's last inserted LSN (and min_lsn at or above the truncation point) must return
exactly the dict-of-lists model's LSNs, in order: no gaps, no duplicates.
"""
import bisect
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from hypothesis_profiles import scaled

from logtide import LogIndex

TAGS = [(1663, 5, 16384 + r, 0, b) for r in range(3) for b in range(4)]


def _stream(seed: int, n: int) -> list[tuple[int, list[tuple]]]:
    """n WAL records: (lsn, the 1..3 pages it touched); some LSN steps change the memtable prefix."""
    rnd = random.Random(seed)
    out, lsn = [], 0
    for _ in range(n):
        lsn += rnd.choice([1, 1, 1, 2, 5]) if rnd.random() > 0.01 else 1 << 32
        out.append((lsn, rnd.sample(TAGS, rnd.randint(1, 3))))
    return out


class Model:
    """The dict-of-lists reference: every LSN of each tag among the first n records."""

    def __init__(self, stream):
        self.stream = stream
        self.lists: dict[tuple, list[int]] = {}
        for lsn, tags in stream:
            for t in tags:
                self.lists.setdefault(t, []).append(lsn)

    def lsns(self, tag, lo, hi):
        lst = self.lists.get(tag, [])
        return lst[bisect.bisect_left(lst, lo):bisect.bisect_right(lst, hi)]


def _feed(li: LogIndex, stream, a: int, b: int, batch: bool = False) -> None:
    """Index records a..b-1: row by row (insert), or as one insert_many call (batch)."""
    if batch:
        rows = [(t, lsn) for lsn, tags in stream[a:b] for t in tags]
        if rows:
            li.insert_many(np.array([t for t, _ in rows], np.uint32), np.array([l for _, l in rows], np.uint64))
        return
    for lsn, tags in stream[a:b]:
        for t in tags:
            li.insert(t, lsn)


def _check(ro: LogIndex, model: Model, upto: int, stream, where: str, low: int = 0, full: bool = True) -> None:
    """Every lookup of the RO at max_lsn <= its last inserted LSN, min_lsn >= low (the truncation
    point), matches the model, and iter_lsn walks the LSNs in order (full=False: the whole range only)."""
    if upto == 0:
        return
    last = stream[upto - 1][0]
    mid = max(low, stream[upto // 2][0])
    ranges = ((low, last), (mid, last), (low, mid), (last, last)) if full else ((low, last),)
    for tag in TAGS:
        for lo, hi in ranges:
            if lo < low:
                continue
            got = ro.lsns(tag, lo, hi).tolist()
            want = model.lsns(tag, lo, hi)
            assert got == want, (where, tag, lo, hi, sorted(set(want) - set(got)), ro.stats()["memtables"])
    walked = [(l, tuple(t)) for l, t in ro.iter_lsn(low) if l <= last]
    assert [l for l, _ in walked] == sorted(l for l, _ in walked), (where, "iter_lsn out of LSN order")
    want_rows = sorted((l, t) for l, tags in stream[:upto] for t in tags if l >= low)
    assert sorted(walked) == want_rows, (where, "iter_lsn")


class RoFollowMachine(RuleBasedStateMachine):
    """Primary and RO advance through one stream independently, row by row or in batches; the primary
    flushes (inactive memtables or also the active one) and truncates at any point, and may be
    replaced by a new primary; the RO refreshes, reads and reopens."""

    @initialize(seed=st.integers(0, 2**16), p_seg=st.sampled_from([2, 3, 5]), r_seg=st.sampled_from([2, 3, 5]),
                p_ring=st.sampled_from([2, 3, 8, 32]), r_ring=st.sampled_from([2, 3, 8, 32]),
                background=st.booleans())
    def setup(self, seed, p_seg, r_seg, p_ring, r_ring, background):
        self.dir = Path(tempfile.mkdtemp(prefix="li-ro-"))
        self.stream = _stream(seed, 600)
        self.lsn_of = [l for l, _ in self.stream]
        self.model_cache = {}
        self.p_params = dict(max_segments=p_seg, ring_size=p_ring, background_flush=background)
        self.primary = LogIndex.open(self.dir, **self.p_params)
        self.ro_params = dict(max_segments=r_seg, ring_size=r_ring)
        self.ro = LogIndex.open(self.dir, mode="ro", **self.ro_params)
        self.p = 0   # records the primary has indexed
        self.r = 0   # records the RO has indexed
        self.low = 0  # the truncation point: LSNs below it may be gone

    def teardown(self):
        try:
            self.ro.close()
            self.primary.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _model(self, n: int) -> Model:
        m = self.model_cache.get(n)
        if m is None:
            m = self.model_cache[n] = Model(self.stream[:n])
        return m

    @rule(n=st.integers(1, 60), batch=st.booleans())
    def primary_writes(self, n, batch):
        b = min(len(self.stream), self.p + n)
        _feed(self.primary, self.stream, self.p, b, batch)
        self.p = b

    @rule(include_active=st.booleans())
    def primary_flushes(self, include_active):
        self.primary.flush(include_active=include_active)

    @rule(k=st.integers(0, 600))
    def primary_truncates(self, k):
        """Truncate below an LSN the RO has indexed past (as the RO's min used LSN bounds it) and the
        primary's tables have saved (a restart re-inserts from the saved max LSN)."""
        upto = min(self.r, self.p, k)
        if upto == 0:
            return
        lsn = min(self.lsn_of[upto - 1], self.primary.max_saved_lsn)
        if lsn > self.low:
            self.primary.truncate(lsn)
            self.low = lsn

    @rule(ring=st.sampled_from([2, 8, 32]))
    def primary_is_replaced(self, ring):
        """A new primary (a promotion or a restart) opens the directory and re-inserts the WAL from
        replay_needed_from(), in batches, up to where the old one was."""
        self.primary.close()
        self.p_params["ring_size"] = ring
        self.primary = LogIndex.open(self.dir, **self.p_params)
        start = self.primary.replay_needed_from()
        i = bisect.bisect_left(self.lsn_of, start)
        while i < self.p:
            _feed(self.primary, self.stream, i, min(self.p, i + 97), batch=True)
            i += 97

    @rule(n=st.integers(1, 60), batch=st.booleans())
    def ro_inserts(self, n, batch):
        b = min(len(self.stream), self.r + n)
        _feed(self.ro, self.stream, self.r, b, batch)
        self.r = b

    @rule(batch=st.booleans())
    def ro_catches_up(self, batch):
        _feed(self.ro, self.stream, self.r, self.p, batch)
        self.r = max(self.r, self.p)

    @rule()
    def ro_refreshes(self):
        self.ro.refresh()

    @rule()
    def ro_reopens(self):
        """A restarted RO node re-inserts from replay_needed_from() up to where it was."""
        self.ro.close()
        self.ro = LogIndex.open(self.dir, mode="ro", **self.ro_params)
        start = self.ro.replay_needed_from()
        i = bisect.bisect_left(self.lsn_of, start)
        _feed(self.ro, self.stream, i, self.r, batch=True)
        # records the RO had indexed that are now neither saved nor re-inserted cannot exist:
        # replay_needed_from() is at most the primary's saved max LSN
        assert i <= max(self.r, self.p)
        if i > self.r:
            self.r = i

    @invariant()
    def ro_lookups_match_the_model(self):
        _check(self.ro, self._model(self.r), self.r, self.stream, "stateful", self.low)

    @invariant()
    def primary_lookups_match_the_model(self):
        if self.p:
            _check(self.primary, self._model(self.p), self.p, self.stream, "primary", self.low, full=False)


TestRoFollow = RoFollowMachine.TestCase
TestRoFollow.settings = scaled(max_examples=30, stateful_step_count=40, deadline=None)


def test_ro_behind_the_primary_by_several_tables(tmp_path):
    """The RO's memtable is still live for LSNs the primary saved several tables ago."""
    stream = _stream(7, 400)
    primary = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    ro = LogIndex.open(tmp_path, mode="ro", max_segments=2, ring_size=2)
    _feed(ro, stream, 0, 50)
    _feed(primary, stream, 0, 300)
    primary.flush(include_active=True)
    assert primary.meta.max_table_id >= 3
    for r in range(50, 300, 7):
        _feed(ro, stream, r, r + 7)
        _check(ro, Model(stream[:r + 7]), r + 7, stream, f"behind at {r}")
    primary.close()
    ro.close()


@pytest.mark.timeout(60)
def test_ro_follows_a_primary_thread(tmp_path):
    """A primary thread writes and flushes; the RO thread inserts, refreshes and looks up, for a
    bounded time. Every lookup at max_lsn <= the RO's inserted LSN is exact."""
    stream = _stream(11, 6000)
    lsn_of = [l for l, _ in stream]
    model = Model(stream)
    primary = LogIndex.open(tmp_path, max_segments=3, ring_size=2)
    ro = LogIndex.open(tmp_path, mode="ro", max_segments=3, ring_size=3)
    stop = threading.Event()
    errors = []
    deadline = time.monotonic() + 6

    def write():
        rnd = random.Random(1)
        try:
            i = 0
            while i < len(stream) and not stop.is_set():
                n = rnd.randint(1, 40)
                _feed(primary, stream, i, i + n)
                i += n
                if rnd.random() < 0.3:
                    primary.flush(include_active=rnd.random() < 0.5)
                time.sleep(0)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=write)
    t.start()
    rnd = random.Random(2)
    r = lookups = 0
    try:
        while r < len(stream) and time.monotonic() < deadline:
            n = rnd.randint(1, 40)
            _feed(ro, stream, r, r + n)
            r = min(len(stream), r + n)
            if rnd.random() < 0.3:
                ro.refresh()
            last = lsn_of[r - 1]
            for tag in rnd.sample(TAGS, 4):
                hi = rnd.choice([last, lsn_of[rnd.randrange(r)]])
                lo = rnd.choice([0, lsn_of[rnd.randrange(r)]])
                got = ro.lsns(tag, lo, hi).tolist()
                assert got == model.lsns(tag, lo, hi), (r, tag, lo, hi, ro.stats()["memtables"])
                lookups += 1
            time.sleep(0)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert lookups > 100 and r > 500
    primary.close()
    ro.close()
