"""PageTag: the 20-byte page key."""
import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st

from logtide import PageTag, tag_array, tag_rows
from logtide.pagetag import tags_from_array

u32 = st.integers(min_value=0, max_value=2**32 - 1)


@given(st.tuples(u32, u32, u32, u32, u32))
def test_bytes_round_trip(fields):
    t = PageTag(*fields)
    b = t.to_bytes()
    assert len(b) == 20
    assert b == np.array(fields, "<u4").tobytes()
    assert PageTag.from_bytes(b) == t
    assert PageTag.parse(str(t)) == t
    assert pickle.loads(pickle.dumps(t)) == t


def test_hashable_ordered_named():
    a, b = PageTag(1, 2, 3, 0, 9), PageTag(1, 2, 3, 0, 10)
    assert a < b and sorted([b, a]) == [a, b]
    assert {a: 1}[PageTag(1, 2, 3, 0, 9)] == 1
    assert (a.spc, a.db, a.rel, a.fork, a.block) == (1, 2, 3, 0, 9)
    assert a == (1, 2, 3, 0, 9)


def test_tags_are_not_walked_by_the_cycle_collector():
    """A PageTag holds five ints and no dict, so it can never be in a cycle; like a plain tuple of
    ints it is left out of the collector, whichever way it was made (held tags would otherwise
    slow every full collection of the program)."""
    import gc
    made = [PageTag(1, 2, 3, 0, 4), PageTag(np.uint32(1), 2, 3, 0, 4), PageTag.from_bytes(bytes(20)),
            PageTag.parse("1/2/3/0/4"), pickle.loads(pickle.dumps(PageTag(1, 2, 3, 0, 4))),
            *tags_from_array(np.ones((3, 5), np.uint32))]
    assert not any(gc.is_tracked(t) for t in made)
    assert all(type(f) is int for t in made for f in t)   # exact ints: nothing inside can reach back
    held = {t: t for t in made}
    gc.collect()
    assert held[PageTag(1, 2, 3, 0, 4)] == (1, 2, 3, 0, 4)


def test_arrays_both_views():
    tags = [PageTag(1663, 5, 16384, 0, i) for i in range(10)]
    arr = tag_array(tags)
    assert arr.shape == (10, 5) and arr.dtype == np.uint32
    rows = tag_rows(arr)
    assert rows.shape == (10, 20) and rows.dtype == np.uint8
    assert rows[3].tobytes() == tags[3].to_bytes()
    assert np.array_equal(tag_array(rows), arr)
    assert tags_from_array(arr) == tags


def test_bad_input():
    with pytest.raises(ValueError):
        PageTag(-1, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        PageTag(2**32, 0, 0, 0, 0)
    with pytest.raises(TypeError):
        PageTag("1", 0, 0, 0, 0)
    with pytest.raises(ValueError):
        PageTag.from_bytes(b"\0" * 19)
    with pytest.raises(ValueError):
        PageTag.parse("1/2/3")
    with pytest.raises(ValueError):
        tag_array(np.zeros((3, 4), np.uint32))
    with pytest.raises(ValueError):
        tag_array(np.array([[-1, 0, 0, 0, 0]]))
