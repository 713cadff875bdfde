"""Physical replication benchmarks: Cython redo against a pure-Python redo of the same WAL.

Baseline: `py_redo`, a straightforward Python implementation of the same record layout and heap
redo (struct parsing, bytearray pages), the way a replica written in Python would apply WAL.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("redo apply_batch (Cython, GIL released) vs pure-Python redo", "test_redo_batch", "test_redo_python",
          10.0, 5),
    Ratio("redo per-call apply vs pure-Python redo", "test_redo_per_call", "test_redo_python", 3.0, 5),
]

REL = (1663, 5, 16384)
NPAGES = 64


def _workload(n: int, seed: int = 3):
    """n heap records over 64 pages (60% insert, 25% update, some across pages, 15% delete)."""
    from logtide._ext import page as pg
    from logtide._ext import xlogwriter as xw
    rng = np.random.default_rng(seed)
    pages = [bytearray(8192) for _ in range(NPAGES)]
    live: list[tuple[int, int]] = []
    recs, entries = [], []  # entries: (page, record index, lsn)
    lsn = 0
    while len(recs) < n:
        r = rng.random()
        if r < 0.6 or not live:
            b = int(rng.integers(0, NPAGES))
            p = pages[b]
            init = pg.is_new(p)
            if init:
                pg.init(p)
            size = int(rng.integers(20, 120))
            if not pg.fits(p, size):
                pg.init(p)  # recycle the page: a fresh INIT_PAGE insert
                live = [t for t in live if t[0] != b]
                init = True
            off = pg.nslots(p) + 1
            tup = rng.bytes(size)
            rec = xw.heap_insert(REL + (0, b), off, tup, prev=lsn, init=init)
            lsn += 1
            pg.add(p, off, tup)
            pg.set_lsn(p, lsn)
            live.append((b, off))
            recs.append(rec)
            entries.append((b, len(recs) - 1, lsn))
        elif r < 0.85:
            i = int(rng.integers(0, len(live)))
            ob, ooff = live[i]
            nb = ob if rng.random() < 0.7 else int(rng.integers(0, NPAGES))
            size = int(rng.integers(20, 120))
            np_ = pages[nb]
            if pg.is_new(np_) or not pg.fits(np_, size):
                continue
            noff = pg.nslots(np_) + 1
            tup = rng.bytes(size)
            rec = xw.heap_update(REL + (0, nb), noff, tup, REL + (0, ob), ooff, prev=lsn)
            lsn += 1
            pg.kill(pages[ob], ooff)
            pg.add(np_, noff, tup)
            pg.set_lsn(pages[ob], lsn)
            pg.set_lsn(np_, lsn)
            live[i] = (nb, noff)
            recs.append(rec)
            entries.append((nb, len(recs) - 1, lsn))
            if nb != ob:
                entries.append((ob, len(recs) - 1, lsn))
        else:
            i = int(rng.integers(0, len(live)))
            b, off = live.pop(i)
            rec = xw.heap_delete(REL + (0, b), off, prev=lsn)
            lsn += 1
            pg.kill(pages[b], off)
            pg.set_lsn(pages[b], lsn)
            recs.append(rec)
            entries.append((b, len(recs) - 1, lsn))
    return recs, entries, pages


# ------------------------------------------------------------------ the pure-Python baseline
_HDR = struct.Struct("<IIQBB2xI")


def _py_decode(rec: bytes):
    tot_len, xid, prev, info, rmid, crc = _HDR.unpack_from(rec, 0)
    pos, datatotal, blocks, main_len, last = 24, 0, [], 0, None
    while tot_len - pos > datatotal:
        bid = rec[pos]
        if bid == 255:
            main_len = rec[pos + 1]
            pos += 2
            break
        if bid == 254:
            main_len = struct.unpack_from("<I", rec, pos + 1)[0]
            pos += 5
            break
        ff, dlen = struct.unpack_from("<BH", rec, pos + 1)
        pos += 4
        if ff & 0x80:
            rnode = last[0]
        else:
            rnode = struct.unpack_from("<III", rec, pos)
            pos += 12
        blk = struct.unpack_from("<I", rec, pos)[0]
        pos += 4
        last = (rnode, ff & 0x0F, blk, ff & 0xF0, dlen)
        blocks.append(last)
        datatotal += dlen
    out = []
    for rnode, fork, blk, flags, dlen in blocks:
        out.append((rnode + (fork, blk), flags, rec[pos:pos + dlen]))
        pos += dlen
    from logtide import crc32c
    if crc32c(rec[:20], crc32c(rec[24:])) != crc:
        raise ValueError("bad CRC")
    return rmid, info, out, rec[pos:pos + main_len]


def _py_add(p: bytearray, off: int, tup: bytes) -> None:
    lower, upper = struct.unpack_from("<HH", p, 12)
    n = (lower - 24) // 4
    alen = (len(tup) + 7) & ~7
    upper -= alen
    p[upper:upper + len(tup)] = tup
    struct.pack_into("<I", p, 24 + (off - 1) * 4, upper | (1 << 15) | (len(tup) << 17))
    if off == n + 1:
        lower += 4
    struct.pack_into("<HH", p, 12, lower, upper)


def _py_kill(p: bytearray, off: int) -> None:
    o = 24 + (off - 1) * 4
    iid = struct.unpack_from("<I", p, o)[0]
    struct.pack_into("<I", p, o, (iid & 0x7FFF) | (3 << 15) | (iid & 0xFFFE0000))


def py_redo(page: bytearray, tag: tuple, rec: bytes, lsn: int) -> int:
    rmid, info, blocks, main = _py_decode(rec)
    hi, lo = struct.unpack_from("<II", page, 0)
    if struct.unpack_from("<H", page, 14)[0] != 0 and lsn <= (hi << 32 | lo):
        return 0
    bid = next(i for i, b in enumerate(blocks) if b[0] == tag)
    _, flags, data = blocks[bid]
    if flags & 0x40:
        page[:] = bytes(8192)
        struct.pack_into("<HHHH", page, 12, 24, 8192, 8192, 8192 | 4)
    op = info & 0x70
    if op == 0x00:
        _py_add(page, struct.unpack_from("<H", main, 0)[0], data)
    elif op == 0x10:
        _py_kill(page, struct.unpack_from("<H", main, 4)[0])
    else:
        old_off, new_off = struct.unpack_from("<H", main, 4)[0], struct.unpack_from("<H", main, 12)[0]
        if bid == 0:
            if len(blocks) == 1:
                _py_kill(page, old_off)
            _py_add(page, new_off, data)
        else:
            _py_kill(page, old_off)
    struct.pack_into("<II", page, 0, lsn >> 32, lsn & 0xFFFFFFFF)
    return 1


@pytest.fixture(scope="module")
def redo_work():
    return _workload(scaled(50_000))


def _check(pages_out, want):
    for b in range(NPAGES):
        assert bytes(pages_out[b]) == bytes(want[b]), b


@pytest.mark.benchmark(group="redo")
def test_redo_batch(benchmark, items, redo_work):
    from logtide._ext import redo
    recs, entries, want = redo_work
    rows = np.array([e[0] for e in entries], dtype=np.int64)
    tags = np.array([REL + (0, e[0]) for e in entries], dtype=np.uint32)
    lens = np.array([len(r) for r in recs], dtype=np.int64)
    roff = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    blob = np.frombuffer(b"".join(recs), dtype=np.uint8)
    ri = np.array([e[1] for e in entries], dtype=np.int64)
    # per entry: its record's bytes, laid out in entry order
    eblob = np.concatenate([blob[roff[i]:roff[i + 1]] for i in ri])
    eoff = np.concatenate([[0], np.cumsum(lens[ri])]).astype(np.int64)
    lsns = np.array([e[2] for e in entries], dtype=np.uint64)
    items(len(entries))

    def run():
        pages = np.zeros((NPAGES, 8192), dtype=np.uint8)
        res, applied, bad = redo.apply_batch(pages, rows, tags, eblob, eoff, lsns)
        assert bad == -1
        return pages

    _check(benchmark(run), want)


@pytest.mark.benchmark(group="redo")
def test_redo_per_call(benchmark, items, redo_work):
    from logtide._ext import redo
    recs, entries, want = redo_work
    items(len(entries))
    tags = [REL + (0, b) for b in range(NPAGES)]

    def run():
        pages = [bytearray(8192) for _ in range(NPAGES)]
        apply = redo.apply
        for b, i, lsn in entries:
            apply(pages[b], tags[b], recs[i], lsn)
        return pages

    _check(benchmark(run), want)


@pytest.mark.benchmark(group="redo")
def test_redo_python(benchmark, items, redo_work):
    recs, entries, want = redo_work
    items(len(entries))
    tags = [REL + (0, b) for b in range(NPAGES)]

    def run():
        pages = [bytearray(8192) for _ in range(NPAGES)]
        for b, i, lsn in entries:
            py_redo(pages[b], tags[b], recs[i], lsn)
        return pages

    _check(benchmark(run), want)
