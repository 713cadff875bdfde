"""Redo against a model: random heap workloads replayed from scratch, from any snapshot, twice, in batch.

The model is the primary's own page operations plus a dict (block, slot) -> tuple; the replica
replays the encoded WAL and must end byte-identical to the primary's pages.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.errors import CorruptWALRecordError, RedoError
from logtide._ext import page as pg
from logtide._ext import redo, xlogwriter as xw

REL = (1663, 5, 16384)
NBLOCKS = 4


def tag(blk):
    return REL + (0, blk)


op_st = st.one_of(
    st.tuples(st.just("ins"), st.integers(0, NBLOCKS - 1), st.integers(1, 700), st.integers(0, 255)),
    st.tuples(st.just("upd"), st.integers(0, 10**6), st.integers(0, NBLOCKS - 1), st.integers(1, 700)),
    st.tuples(st.just("del"), st.integers(0, 10**6)),
    st.tuples(st.just("fpi"), st.integers(0, NBLOCKS - 1)),
)


class Primary:
    """Executes ops on its pages and logs them, the way replay.Primary does."""

    def __init__(self, first_lsn):
        self.pages = {b: bytearray(8192) for b in range(NBLOCKS)}
        self.live = {}
        self.log = []        # (lsn, record, [blocks])
        self.lsn = first_lsn - 1
        self.snapshots = []  # (lsn, {blk: bytes})

    def _next(self):
        self.lsn += 1
        return self.lsn

    def _prev(self):
        return self.log[-1][0] if self.log else 0

    def run(self, op):
        kind = op[0]
        if kind == "ins":
            _, blk, size, fill = op
            p = self.pages[blk]
            init = pg.is_new(p)
            if init:
                pg.init(p)
            if not pg.fits(p, size):
                return
            t = bytes([fill]) * size
            off = pg.nslots(p) + 1
            rec = xw.heap_insert(tag(blk), off, t, xid=7, prev=self._prev(), init=init)
            lsn = self._next()
            pg.add(p, off, t)
            pg.set_lsn(p, lsn)
            self.live[(blk, off)] = t
            self.log.append((lsn, rec, [blk]))
        elif kind == "upd":
            if not self.live:
                return
            _, pick, nblk, size = op
            oblk, ooff = sorted(self.live)[pick % len(self.live)]
            np_ = self.pages[nblk]
            init = pg.is_new(np_)
            if init and nblk == oblk:
                return
            if init:
                pg.init(np_)
            if not pg.fits(np_, size):
                return
            t = bytes([size & 0xFF]) * size
            noff = pg.nslots(np_) + 1
            rec = xw.heap_update(tag(nblk), noff, t, tag(oblk), ooff, xid=8, prev=self._prev(), init=init)
            lsn = self._next()
            pg.kill(self.pages[oblk], ooff)
            pg.add(np_, noff, t)
            pg.set_lsn(self.pages[oblk], lsn)
            pg.set_lsn(np_, lsn)
            del self.live[(oblk, ooff)]
            self.live[(nblk, noff)] = t
            self.log.append((lsn, rec, sorted({oblk, nblk}, key=lambda b: b != nblk)))
        elif kind == "del":
            if not self.live:
                return
            blk, off = sorted(self.live)[op[1] % len(self.live)]
            rec = xw.heap_delete(tag(blk), off, xid=9, prev=self._prev())
            lsn = self._next()
            pg.kill(self.pages[blk], off)
            pg.set_lsn(self.pages[blk], lsn)
            del self.live[(blk, off)]
            self.log.append((lsn, rec, [blk]))
        elif kind == "fpi":
            p = self.pages[op[1]]
            if pg.is_new(p):
                return
            rec = xw.full_page_images([tag(op[1])], [bytes(p)], prev=self._prev())
            lsn = self._next()
            pg.set_lsn(p, lsn)
            self.log.append((lsn, rec, [op[1]]))
        self.snapshots.append((self.lsn, {b: bytes(p) for b, p in self.pages.items()}))


def replay(log, pages=None):
    pages = pages if pages is not None else {b: bytearray(8192) for b in range(NBLOCKS)}
    for lsn, rec, blks in log:
        for b in blks:
            redo.apply(pages[b], tag(b), rec, lsn)
    return pages


lsn_st = st.sampled_from([1, 2**32 - 3, 2**40])  # also cross the 32-bit prefix boundary


@given(st.lists(op_st, max_size=120), lsn_st)
@scaled(max_examples=120, deadline=None)
def test_replay_from_scratch_is_byte_identical(ops, first):
    prim = Primary(first)
    for op in ops:
        prim.run(op)
    rep = replay(prim.log)
    for b in range(NBLOCKS):
        assert bytes(rep[b]) == bytes(prim.pages[b]), b
    model = {}
    for b in range(NBLOCKS):
        for off, t in pg.items(rep[b]).items():
            model[(b, off)] = t
    assert model == prim.live


@given(st.lists(op_st, min_size=1, max_size=80), st.integers(0, 10**6), lsn_st)
@scaled(max_examples=80, deadline=None)
def test_replay_from_any_snapshot_and_twice(ops, pick, first):
    """Lazy replay starts from a stored page at some LSN and replays the whole list: older LSNs skip."""
    prim = Primary(first)
    for op in ops:
        prim.run(op)
    if not prim.snapshots:
        return
    _, snap = prim.snapshots[pick % len(prim.snapshots)]
    pages = {b: bytearray(p) for b, p in snap.items()}
    replay(prim.log, pages)
    replay(prim.log, pages)  # idempotent: a second pass changes nothing
    for b in range(NBLOCKS):
        assert bytes(pages[b]) == bytes(prim.pages[b])


@given(st.lists(op_st, max_size=100), lsn_st)
@scaled(max_examples=60, deadline=None)
def test_batch_equals_per_call(ops, first):
    prim = Primary(first)
    for op in ops:
        prim.run(op)
    rows, tags, recs, offs, lsns = [], [], [], [0], []
    for lsn, rec, blks in prim.log:
        for b in blks:
            rows.append(b)
            tags.append(tag(b))
            recs.append(rec)
            offs.append(offs[-1] + len(rec))
            lsns.append(lsn)
    pages = np.zeros((NBLOCKS, 8192), dtype=np.uint8)
    res, applied, bad = redo.apply_batch(
        pages, np.array(rows, dtype=np.int64), np.array(tags, dtype=np.uint32).reshape(-1, 5),
        np.frombuffer(b"".join(recs), dtype=np.uint8), np.array(offs, dtype=np.int64),
        np.array(lsns, dtype=np.uint64))
    assert bad == -1 and applied == len(rows) and (res == 1).all()
    for b in range(NBLOCKS):
        assert pages[b].tobytes() == bytes(prim.pages[b])
    # again: everything is already applied
    res, applied, bad = redo.apply_batch(
        pages, np.array(rows, dtype=np.int64), np.array(tags, dtype=np.uint32).reshape(-1, 5),
        np.frombuffer(b"".join(recs), dtype=np.uint8), np.array(offs, dtype=np.int64),
        np.array(lsns, dtype=np.uint64))
    assert bad == -1 and applied == 0 and (res == 0).all()


def _small_log():
    prim = Primary(10)
    for op in [("ins", 0, 50, 1), ("ins", 0, 60, 2), ("ins", 1, 70, 3), ("upd", 0, 1, 30), ("del", 0),
               ("fpi", 0)]:
        prim.run(op)
    return prim


def test_every_byte_flip_and_truncation_is_refused():
    prim = _small_log()
    for lsn, rec, blks in prim.log:
        base = replay([e for e in prim.log if e[0] < lsn])
        for i in range(len(rec)):
            bad = bytearray(rec)
            bad[i] ^= 0x41
            page = bytearray(base[blks[0]])
            with pytest.raises(CorruptWALRecordError):
                redo.apply(page, tag(blks[0]), bytes(bad), lsn)
            assert page == base[blks[0]]  # nothing applied
        for k in range(0, len(rec), 7):
            with pytest.raises(CorruptWALRecordError):
                redo.apply(bytearray(base[blks[0]]), tag(blks[0]), rec[:k], lsn)


def test_batch_stops_at_the_corrupt_record():
    prim = _small_log()
    recs = [r for _, r, _ in prim.log]
    broken = bytearray(recs[2])
    broken[-1] ^= 1
    recs[2] = bytes(broken)
    offs = np.cumsum([0] + [len(r) for r in recs]).astype(np.int64)
    pages = np.zeros((NBLOCKS, 8192), dtype=np.uint8)
    res, applied, bad = redo.apply_batch(
        pages, np.array([b[0] for _, _, b in prim.log], dtype=np.int64),
        np.array([tag(b[0]) for _, _, b in prim.log], dtype=np.uint32),
        np.frombuffer(b"".join(recs), dtype=np.uint8), offs,
        np.array([lsn for lsn, _, _ in prim.log], dtype=np.uint64))
    assert bad == 2 and applied == 2 and list(res[:3]) == [1, 1, redo.BAD_CRC]


def test_wrong_page_and_missing_page_are_typed_errors():
    prim = _small_log()
    lsn, rec, blks = prim.log[0]
    with pytest.raises(RedoError):
        redo.apply(bytearray(8192), tag(3), rec, lsn)  # record does not touch block 3
    lsn, rec, blks = prim.log[1]  # insert without INIT on a page that was never initialized
    with pytest.raises(RedoError):
        redo.apply(bytearray(8192), tag(0), rec, lsn)
    page = pg.new_page()
    pg.add(page, 1, b"x")
    pg.add(page, 2, b"y")  # slot 2 taken: the insert of slot 2 disagrees with the page
    with pytest.raises(RedoError):
        redo.apply(page, tag(0), rec, lsn)


def test_two_block_update_touches_each_page_once():
    prim = Primary(1)
    prim.run(("ins", 0, 100, 1))
    prim.run(("upd", 0, 1, 200))
    lsn, rec, blks = prim.log[-1]
    d = redo.decode(rec)
    assert [b["tag"] for b in d["blocks"]] == [tag(1), tag(0)]
    assert d["blocks"][1]["flags"] & 0x80  # SAME_REL on the second block
    p0 = replay(prim.log[:1])[0]
    assert redo.apply(p0, tag(0), rec, lsn) == redo.APPLIED
    assert pg.items(p0) == {}
    assert redo.apply(p0, tag(0), rec, lsn) == redo.SKIPPED
