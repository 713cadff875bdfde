"""The per-call lookup path (TableLookup: bit-sliced blooms, cached tables, memtables) against a
dict-of-lists model: many bloom words, more candidates than fit its stack buffers, a tiny table
cache that evicts mid-call, damaged blooms (the linear range walk) and the cache's clock."""
import bisect
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import LogIndex
from logtide.logindex.table_format import bloom_file_name

MAX = 2**64 - 1
POOL = [(1663, 5, 16384 + r, 0, b) for r in range(3) for b in range(5)]


def _want(lists, tag, lo, hi):
    lst = lists.get(tag, [])
    return lst[bisect.bisect_left(lst, lo):bisect.bisect_right(lst, hi)]


def _check(li, lists, tags, windows):
    for tag in tags:
        for lo, hi in windows:
            got = li.lsns(tag, lo, hi)
            assert got.dtype == np.uint64
            assert got.tolist() == _want(lists, tag, lo, hi), (tag, lo, hi)
    offsets, found = li.lsns_many(np.array(tags, np.uint32), 0, MAX)
    for i, tag in enumerate(tags):
        assert found[offsets[i]:offsets[i + 1]].tolist() == li.lsns(tag).tolist()


@scaled(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(range(len(POOL))), st.sampled_from([0, 1, 1, 1, 5, 2**32])),
                     min_size=1, max_size=400),
       max_segments=st.sampled_from([1, 2, 5]),
       flush=st.sampled_from(["none", "inactive", "all"]),
       reopen=st.sampled_from(["same", "primary", "ro"]),
       cache=st.sampled_from([1, 3, 256]),
       damage_bloom=st.booleans(),
       cuts=st.lists(st.floats(0, 1), min_size=2, max_size=6))
def test_lsns_matches_model(rows, max_segments, flush, reopen, cache, damage_bloom, cuts):
    d = Path(tempfile.mkdtemp(prefix="li-lookup-"))
    try:
        li = LogIndex.open(d, max_segments=max_segments, ring_size=2)
        lists, lsn, seen = {}, 1, set()
        tags, lsns = [], []
        for ti, step in rows:
            lsn += step
            if (POOL[ti], lsn) in seen:
                continue
            seen.add((POOL[ti], lsn))
            tags.append(POOL[ti])
            lsns.append(lsn)
            lists.setdefault(POOL[ti], []).append(lsn)
        li.insert_many(np.array(tags, np.uint32), np.array(lsns, np.uint64))
        if flush != "none":
            li.flush(include_active=flush == "all")
        if reopen != "same":
            if flush != "all":
                return  # unsaved memtables would need a re-insert: the stateful test covers that
            li.close()
            if damage_bloom and (d / bloom_file_name(0)).exists():
                path = d / bloom_file_name(0)
                raw = bytearray(path.read_bytes())
                raw[len(raw) // 2] ^= 0x40
                path.write_bytes(bytes(raw))
            li = LogIndex.open(d, mode=reopen, table_cache=cache, max_segments=max_segments, ring_size=2)
        lo_hi = sorted(lsns[int(c * (len(lsns) - 1))] for c in cuts)
        windows = [(0, MAX), (lo_hi[0], lo_hi[-1]), (lo_hi[0], MAX), (0, lo_hi[-1]), (lo_hi[-1], lo_hi[0]),
                   (lsn + 1, MAX)]
        _check(li, lists, POOL + [(9, 9, 9, 9, 9)], windows)
        st_ = li.stats()
        assert st_["lookups"] > 0 and st_["tables_read"] + st_["tables_skipped_bloom"] >= 0
        li.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("cache", [1, 8, 4096])
def test_hundreds_of_candidate_tables(tmp_path, cache):
    """One tag in ~300 tables: more candidates and LSNs than the per-call stack buffers hold, with a
    table cache that evicts candidates while one call is still walking."""
    li = LogIndex.open(tmp_path, max_segments=1, ring_size=2)
    hot = (1, 2, 3, 0, 7)
    want = []
    for l in range(1, 1300):
        if l % 2:
            li.insert(hot, l)
            want.append(l)
        else:
            li.insert((1, 2, 3, 0, 100 + l), l)
    li.flush(include_active=True)
    li.close()
    ro = LogIndex.open(tmp_path, mode="ro", table_cache=cache)
    assert ro.stats()["saved_tables"] > 256
    assert ro.lsns(hot).tolist() == want
    assert ro.lsns(hot, 101, 999).tolist() == [x for x in want if 101 <= x <= 999]
    assert ro.lsns((1, 2, 3, 0, 102)).tolist() == [2]
    st = ro.stats()
    assert st["tables_read"] >= 300
    ro.close()


def test_table_cache_clock_keeps_a_hot_table(tmp_path):
    """A table used between loads of others stays cached (a second chance), where a FIFO cache
    would read it again every few loads."""
    li = LogIndex.open(tmp_path, max_segments=4, ring_size=2)
    lsn = 0
    tags = [(1, 2, 3, 0, i) for i in range(20)]
    for t in tags:  # 32 LSNs fill a 4-segment table: table i holds tag i only
        for _ in range(32):
            lsn += 1
            li.insert(t, lsn)
    li.flush(include_active=True)
    li.close()
    ro = LogIndex.open(tmp_path, table_cache=4)
    assert ro.stats()["saved_tables"] == 20
    hot = tags[0]
    assert ro.lsns(hot).tolist() == list(range(1, 33))
    loaded = ro.stats()["tables_loaded"]
    for i in range(1, 20):
        before = ro.stats()["tables_loaded"]
        assert ro.lsns(hot).tolist() == list(range(1, 33))
        assert ro.stats()["tables_loaded"] == before, f"the hot table was read again before tag {i}"
        assert ro.lsns(tags[i]).tolist() == list(range(32 * i + 1, 32 * i + 33))
    assert ro.stats()["tables_loaded"] - loaded <= 19 + 2   # each other table once (+ bloom false positives)
    ro.close()
