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


def test_from_bytes_refuses_what_is_not_20_bytes_with_a_typed_error():
    """The length is counted in bytes, not items: a view of 20 int32 is 80 bytes, a ValueError
    (it used to reach struct and raise struct.error); an object that is not bytes-like is a TypeError."""
    t = PageTag(1663, 5, 16384, 0, 7)
    raw = t.to_bytes()
    for bad in (memoryview(np.zeros(20, np.int32)), np.zeros(20, np.int32), b"\0" * 19, raw + b"\0",
                bytearray(), memoryview(raw)[:10]):
        with pytest.raises(ValueError):
            PageTag.from_bytes(bad)
    for bad in ("x" * 20, None, 20, [0] * 20, tuple(t)):
        with pytest.raises(TypeError):
            PageTag.from_bytes(bad)
    # every bytes-like form of the same 20 bytes, contiguous or not, is the same tag
    strided = np.frombuffer(raw, np.uint8).repeat(2)[::2]
    for good in (raw, bytearray(raw), memoryview(raw), np.frombuffer(raw, "<u4"), strided,
                 memoryview(np.frombuffer(raw, "<u4"))):
        assert PageTag.from_bytes(good) == t
    assert type(PageTag.from_bytes(raw)) is PageTag


def test_parse_takes_only_ascii_decimal_fields():
    """int() would take '1_0' (as 10), Unicode digits, signs and spaces: parse refuses them, so a
    tag's text names one page only."""
    for bad in ("1/2/3/4/1_0", "1/2/3/4/\u0665", "1/2/3/4/\u00b2", "1/2/3/4/\uff15", " 1/2/3/4/5", "1/2/3/4/5\n",
                "+1/2/3/4/5", "-1/2/3/4/5", "1/2/3/4/", "1/2/3/4/0x5", "1/2/3/4/5.0", "1/2/3/4/4294967296",
                "1/2/3/4/" + "9" * 5000, "1/2/3/4/5/6", ""):
        with pytest.raises(ValueError):
            PageTag.parse(bad)
    for bad in (b"1/2/3/4/5", None, PageTag(1, 2, 3, 4, 5)):
        with pytest.raises(TypeError):
            PageTag.parse(bad)
    assert PageTag.parse("1663/5/16384/0/4294967295") == (1663, 5, 16384, 0, 2**32 - 1)
    assert PageTag.parse("01/2/3/4/007") == (1, 2, 3, 4, 7)   # leading zeros are plain digits
