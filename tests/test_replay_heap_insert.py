"""The primary's single-tuple insert in C (_ext/heap_insert.pyx) against the Python steps it replaces.

apply_insert must leave the frame as xlogwriter.heap_insert followed by page.init/add/set_lsn
leave it, return the same slot and the same WAL record bytes, and for a tuple the page refuses
raise the same typed error with every frame unchanged. End to end, the primary's recovery and
kill tests (tests/test_replay_recovery.py, test_replay_kill.py) run through it.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide._ext import page as pg
from logtide._ext import xlogwriter as xw
from logtide._ext.heap_insert import apply_insert
from logtide.replay.buffer_pool import PAGE_SIZE

FRAMES = 3


def _python_insert(frames, f, tag, tup, xid, lsn, init):
    # the Primary's per-insert steps before apply_insert
    page = frames[f]
    off = 1 if init else pg.nslots(page) + 1
    rec = xw.heap_insert(tag, off, tup, xid, lsn - 1, init)
    if init:
        pg.init(page)
    pg.add(page, off, tup)
    pg.set_lsn(page, lsn)
    return off, rec


def _outcome(f):
    try:
        return f()
    except Exception as exc:   # the type is compared: both sides must raise the same typed error
        return type(exc)


# a tuple: mostly fitting sizes, some a page refuses (empty, too large) or that fill the page
tuples = st.one_of(st.binary(min_size=1, max_size=200), st.binary(min_size=0, max_size=0),
                   st.integers(1000, 8300).map(lambda n: b"t" * n))


@scaled(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, FRAMES - 1), tuples, st.booleans(),
                                st.integers(0, 0xFFFFFFFF)), min_size=1, max_size=40),
       rel=st.integers(1, 2**32 - 1), block=st.integers(0, 2**32 - 1))
def test_apply_insert_is_the_python_steps(steps, rel, block):
    want, got = np.zeros((FRAMES, PAGE_SIZE), np.uint8), np.zeros((FRAMES, PAGE_SIZE), np.uint8)
    lsn = 1
    for f, tup, init, xid in steps:
        init = init or pg.is_new(want[f])   # a never-used frame is only written as a new page
        tag = (1663, 5, rel, 0, block + f if block + f < 2**32 else block)
        before = got.copy()
        w = _outcome(lambda: _python_insert(want, f, tag, tup, xid, lsn, init))
        g = _outcome(lambda: apply_insert(got, f, tag, tup, xid, lsn, init))
        assert g == w
        if isinstance(w, type):
            assert np.array_equal(got, before)   # refused: nothing changed
            want[:] = got                          # the Python steps may have initialized the page
        else:
            lsn += 1
        assert np.array_equal(got, want)


def test_apply_insert_refuses_bad_frames():
    frames = np.zeros((2, PAGE_SIZE), np.uint8)
    tag = (1663, 5, 1, 0, 0)
    with pytest.raises(IndexError):
        apply_insert(frames, 2, tag, b"x", 0, 1, True)
    with pytest.raises(ValueError):
        apply_insert(np.zeros((2, 100), np.uint8), 0, tag, b"x", 0, 1, True)
    with pytest.raises(ValueError):
        apply_insert(frames, 0, tag, b"x", 0, 0, True)
    assert not frames.any()
