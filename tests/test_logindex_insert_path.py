"""LogIndex.insert's one-call Cython path (InsertPath) against a dict-of-sets model: every return
value, every error and every lookup, across memtable switches, flushes and the slow path's cases,
with the tag spelled as a tuple, a list, an array or the library's own PageTag."""
import time

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import LogIndex, PageTag
from logtide.errors import LsnOrderError

TAGS = [(1663, 5, 16384, f, b) for f in (0, 1) for b in range(5)]
MAX = 2**64 - 1

# one op: (tag index, LSN step, how the call is spelled, what goes wrong)
ops = st.lists(st.tuples(st.integers(0, len(TAGS) - 1), st.sampled_from([0, 0, 1, 1, 2, 5, 2**32]),
                         st.sampled_from(["tuple", "list", "array", "np_lsn", "pagetag", "pagetag_bytes"]),
                         st.sampled_from([None] * 8 + ["older", "negative", "too_big", "bad_tag", "flush"])),
               min_size=1, max_size=120)


@scaled(max_examples=40, deadline=None)
@given(ops=ops, max_segments=st.sampled_from([1, 2, 4]), background=st.booleans())
def test_insert_per_call_matches_model(tmp_path_factory, ops, max_segments, background):
    li = LogIndex.open(tmp_path_factory.mktemp("ip"), max_segments=max_segments, ring_size=2,
                       background_flush=background)
    model: dict[tuple, set] = {}
    lsn = 1
    try:
        for ti, step, form, trouble in ops:
            tag = TAGS[ti]
            before = li.stats()["inserted"]
            if trouble == "flush":
                li.flush(include_active=step == 0)
                continue
            if trouble == "older" and lsn > 1:
                saved = li.max_saved_lsn
                if lsn - 1 > saved:
                    with pytest.raises(LsnOrderError):
                        li.insert(tag, lsn - 1)
                elif lsn - 1 < saved:
                    assert li.insert(tag, lsn - 1) is False  # below the saved LSN: skipped as saved
                else:  # at it: skipped if the saved tables hold the page there, else out of order
                    try:
                        assert li.insert(tag, lsn - 1) is False
                    except LsnOrderError:
                        pass
            elif trouble == "negative":
                with pytest.raises(ValueError):
                    li.insert(tag, -1)
            elif trouble == "too_big":
                with pytest.raises(ValueError):
                    li.insert(tag, MAX + 1)
            elif trouble == "bad_tag":
                with pytest.raises((TypeError, OverflowError)):
                    li.insert((1, 2, 3), lsn + step)
                with pytest.raises((TypeError, OverflowError)):
                    li.insert((1, 2, 3, 4, -5), lsn + step)
            assert li.stats()["inserted"] == before, "a refused insert stores nothing"
            lsn += step
            spelled = {"tuple": tag, "list": list(tag), "array": np.array(tag, np.uint32), "pagetag": PageTag(*tag),
                       "pagetag_bytes": PageTag.from_bytes(PageTag(*tag).to_bytes())}.get(form, tag)
            arg = np.uint64(lsn) if form == "np_lsn" else lsn
            new = lsn not in model.setdefault(tag, set())
            assert li.insert(spelled, arg) is new
            model[tag].add(lsn)
            assert li.stats()["inserted"] == before + new
        for tag in TAGS:
            assert li.lsns(tag).tolist() == sorted(model.get(tag, ()))
        walked = [(l, tuple(t)) for l, t in li.iter_lsn()]
        assert sorted(walked) == sorted((l, t) for t, ls in model.items() for l in ls)
    finally:
        li.close()


def test_saved_rows_are_skipped_per_call_after_reopen(tmp_path):
    """After a restart, rows at or below the saved LSN go through the slow path and are skipped."""
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    rows = [(TAGS[i % len(TAGS)], 1 + i // 2) for i in range(40)]
    for t, l in rows:
        assert li.insert(t, l) is True
    li.flush(include_active=True)
    saved = li.max_saved_lsn
    li.close()
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    assert li.replay_needed_from() == saved
    assert all(li.insert(t, l) is False for t, l in rows)
    assert li.stats()["skipped_saved"] == len(rows) and li.stats()["inserted"] == 0
    assert li.insert(TAGS[0], saved + 1) is True   # the fast path takes over above the saved LSN
    assert li.lsns(TAGS[0]).tolist()[-1] == saved + 1
    li.close()


T = [(1663, 5, 16384, 0, b) for b in range(10)]


@pytest.mark.parametrize("mode", ["primary", "ro"])
@pytest.mark.parametrize("ring", [2, 8, 32])
def test_insert_many_never_fills_a_sealed_memtable(tmp_path, mode, ring):
    """A batch that switches memtables twice and then splits a record: the split record's row goes to
    the active memtable, not to the memtable that was active when the batch began (the per-call
    insert was still armed with it; it had room for that page, so the row landed there, out of LSN
    order with the memtables after it: an RO node then replayed a page's records out of order)."""
    if mode == "ro":
        LogIndex.open(tmp_path).close()
    li = LogIndex.open(tmp_path, mode=mode, max_segments=2, ring_size=ring)
    try:
        li.insert_many([T[1]], [1])            # memtable A: page 1 at LSN 1, room for one more LSN of it
        # A takes page 2 and is full; B takes pages 3 and 1; C takes pages 4 and 5 (LSN 6), and the rest
        # of record 6 (page 1) goes to D.
        li.insert_many([T[2], T[3], T[1], T[4], T[5], T[1], T[9]], [2, 3, 4, 5, 6, 6, 7])
        assert li.lsns(T[1]).tolist() == [1, 4, 6]
        walked = [l for l, _ in li.iter_lsn()]
        assert walked == sorted(walked) == [1, 2, 3, 4, 5, 6, 6, 7]
        assert li.insert(T[1], 8) is True      # the per-call insert is armed with the active memtable
        assert li.lsns(T[1]).tolist() == [1, 4, 6, 8]
        assert [l for l, _ in li.iter_lsn()] == [1, 2, 3, 4, 5, 6, 6, 7, 8]
    finally:
        li.close()


def test_abandon_saves_nothing_new_and_reopen_recovers(tmp_path):
    """abandon() is a crash: a running background flush may finish, nothing is written after it
    returns, and a reopen plus re-insert from replay_needed_from() serves every LSN exactly once."""
    d = tmp_path / "li"
    li = LogIndex.open(d, max_segments=1, ring_size=4, background_flush=True)
    rows = [(TAGS[i % len(TAGS)], i + 1) for i in range(400)]
    for tag, lsn in rows:
        li.insert(tag, lsn)
    li.abandon()

    def snapshot():
        return sorted((p.name, p.stat().st_size, p.read_bytes()) for p in d.iterdir() if p.is_file())
    before = snapshot()
    time.sleep(0.3)
    assert snapshot() == before, "files changed after abandon() returned"
    li = LogIndex.open(d, max_segments=1, ring_size=4)
    try:
        start = li.replay_needed_from()
        for tag, lsn in rows:
            if lsn >= start:
                li.insert(tag, lsn)
        for tag in TAGS:
            want = sorted(lsn for t, lsn in rows if t == tag)
            assert sorted(li.lsns(tag, 1, MAX)) == want
    finally:
        li.close()


def test_a_refused_insert_many_indexes_and_counts_nothing(tmp_path):
    """Every check comes before the first change: a batch refused for its LSN order, whose first
    rows the saved tables already hold, leaves the index, its counters and its last LSN as they
    were (the saved rows used to be counted as skipped before the order check refused the batch)."""
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    for i in range(40):
        li.insert(TAGS[i % len(TAGS)], 1 + i // 2)
    li.flush(include_active=True)
    saved = li.max_saved_lsn
    li.close()
    li = LogIndex.open(tmp_path, max_segments=2, ring_size=2)
    try:
        li.insert(TAGS[1], saved + 5)
        lists = {t: li.lsns(t).tolist() for t in TAGS}
        refused = [
            ([TAGS[0], TAGS[1], TAGS[2]], [saved - 1, saved + 9, saved + 7]),    # saved rows, then out of order
            ([TAGS[0], TAGS[1]], [saved - 1, saved + 2]),                       # below the last indexed LSN
            ([TAGS[0]], [saved + 6, saved + 7]),                                 # lengths differ
        ]
        for tags, lsns in refused:
            before = li.stats()
            with pytest.raises((LsnOrderError, ValueError)):
                li.insert_many(np.array(tags, dtype=np.uint32), np.array(lsns, dtype=np.uint64))
            assert li.stats() == before
            assert {t: li.lsns(t).tolist() for t in TAGS} == lists      # (lookups count in stats)
        assert li.insert_many(np.array([TAGS[0], TAGS[2]], dtype=np.uint32),
                              np.array([saved - 1, saved + 6], dtype=np.uint64)) == 1
        assert li.lsns(TAGS[2]).tolist()[-1] == saved + 6
    finally:
        li.close()
