"""Slotted pages against a dict model: slots, free space, LSN, checksum and header checks."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_profiles import scaled

from logtide.errors import CorruptPageError, PageFullError, RedoError
from logtide._ext import page as pg


class PageMachine(RuleBasedStateMachine):
    """A page and a dict slot -> tuple; every rule must agree, including which inserts fit."""

    def __init__(self):
        super().__init__()
        self.page = pg.new_page()
        self.live = {}
        self.nslots = 0
        self.used = 24  # header + slots + aligned tuples

    @rule(data=st.binary(min_size=1, max_size=600))
    def insert(self, data):
        need = ((len(data) + 7) & ~7) + 4
        fits = self.used + need <= 8192
        assert pg.fits(self.page, len(data)) == fits
        if not fits:
            with pytest.raises(PageFullError):
                pg.add(self.page, self.nslots + 1, data)
            return
        pg.add(self.page, self.nslots + 1, data)
        self.nslots += 1
        self.used += need
        self.live[self.nslots] = data

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 10_000))
    def kill(self, pick):
        off = sorted(self.live)[pick % len(self.live)]
        pg.kill(self.page, off)
        del self.live[off]
        with pytest.raises(RedoError):
            pg.kill(self.page, off)  # a dead slot cannot die twice

    @rule(off=st.integers(-3, 3000), data=st.binary(min_size=1, max_size=8))
    def bad_slot(self, off, data):
        if off == self.nslots + 1:
            return
        before = bytes(self.page)
        with pytest.raises((RedoError, PageFullError)):
            pg.add(self.page, off, data)
        assert bytes(self.page) == before  # a refused operation changes nothing

    @rule(lsn=st.integers(0, 2**64 - 1))
    def set_lsn(self, lsn):
        pg.set_lsn(self.page, lsn)
        assert pg.get_lsn(self.page) == lsn

    @invariant()
    def agrees(self):
        assert pg.items(self.page) == self.live
        assert pg.nslots(self.page) == self.nslots
        assert pg.free_space(self.page) == max(0, 8192 - self.used - 4)
        assert pg.verify(self.page, 0) in (0, -4)  # header always consistent; checksum not yet stamped


TestPageMachine = PageMachine.TestCase
TestPageMachine.settings = scaled(max_examples=60, stateful_step_count=60, deadline=None)


def _filled(seed=1):
    rng = np.random.default_rng(seed)
    p = pg.new_page()
    i = 1
    while True:
        t = rng.bytes(int(rng.integers(1, 200)))
        if not pg.fits(p, len(t)):
            break
        pg.add(p, i, t)
        i += 1
    pg.set_lsn(p, 123456789012)
    return p


def test_checksum_catches_every_single_byte_flip():
    p = _filled()
    pg.set_checksum(p, 7)
    assert pg.verify(p, 7) == 0
    assert pg.verify(p, 8) != 0  # the block number is mixed in: a misplaced page fails
    for off in range(0, 8192, 13):
        if off in (8, 9):
            continue
        q = bytearray(p)
        q[off] ^= 0x5A
        assert pg.verify(q, 7) != 0, off
        with pytest.raises(CorruptPageError):
            pg.check(q, 7)


def test_torn_page_is_detected():
    """A page whose first 4 KiB are new and last 4 KiB old (a torn 8 KiB write) fails its checksum."""
    old = pg.new_page()
    for i in range(1, 6):
        pg.add(old, i, bytes([i]) * 100)
    pg.set_checksum(old, 3)
    new = bytearray(old)
    pg.add(new, 6, b"x" * 100)  # slot in the first half, tuple in the second
    pg.set_lsn(new, 123456789013)
    pg.set_checksum(new, 3)
    torn = bytes(new[:4096]) + bytes(old[4096:])
    assert torn != bytes(new)
    assert pg.verify(torn, 3) != 0


def test_new_page_verifies_only_when_all_zero():
    z = bytearray(8192)
    assert pg.is_new(z) and pg.verify(z, 0) == 0
    z[5000] = 1
    assert pg.verify(z, 0) != 0


def test_bad_header_is_corrupt():
    p = pg.new_page()
    p[12:14] = (9000).to_bytes(2, "little")  # pd_lower past pd_upper
    with pytest.raises(CorruptPageError):
        pg.add(p, 1, b"abc")
    with pytest.raises(ValueError):
        pg.init(bytearray(100))


def test_batch_forms_match_per_call():
    pages = np.zeros((6, 8192), dtype=np.uint8)
    for i in range(5):
        pages[i] = np.frombuffer(_filled(i), dtype=np.uint8)
    blk = np.arange(6, dtype=np.uint32)
    pg.set_checksum_many(pages, blk)
    for i in range(6):
        assert pg.checksum(pages[i], i) == int.from_bytes(pages[i, 8:10].tobytes(), "little") or i == 5
    pages[2, 4000] ^= 1
    res = pg.verify_many(pages, blk)
    assert list(res) == [pg.verify(pages[i], i) for i in range(6)]
    assert res[2] != 0 and (np.delete(res, 2) == 0).all()
    assert list(pg.lsn_many(pages)) == [123456789012] * 5 + [0]


@given(st.lists(st.binary(min_size=1, max_size=8160), min_size=1, max_size=40))
@scaled(max_examples=50, deadline=None)
def test_tuple_bytes_roundtrip_and_bounds(tuples):
    p = pg.new_page()
    stored = {}
    for t in tuples:
        off = pg.nslots(p) + 1
        if pg.fits(p, len(t)):
            pg.add(p, off, t)
            stored[off] = t
    assert pg.items(p) == stored
    with pytest.raises(RedoError):
        pg.add(p, pg.nslots(p) + 1, b"x" * 8161)
