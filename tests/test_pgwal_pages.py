"""The WAL page decoder against an independent Python writer of PostgreSQL's page layout: records
split across pages (headers included) and segments, long headers, XLOG_SWITCH, and damage."""
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide.errors import CorruptRecordError, CorruptWalPageError
from logtide._ext.xlogreader import WalPageDecoder
from logtide.logindex.pgwal import PgWalReader

PAGE = 8192


def record(tag, size, rmid=10, info=0x00, xid=5):
    """A record with one block reference and main data, padded with block data to about size bytes."""
    spc, db, rel, fork, blk = tag
    data = bytes((i * 7) & 0xFF for i in range(max(1, size - 24 - 20 - 2 - 3)))
    head = struct.pack("<BBH", 0, fork | 0x20, len(data)) + struct.pack("<IIII", spc, db, rel, blk)
    body = head + struct.pack("<BB", 255, 3) + data + b"abc"
    hdr = struct.pack("<IIQBBH", 24 + len(body), xid, 0, info, rmid, 0)
    return hdr + struct.pack("<I", crc32c(hdr[:20], crc32c(body))) + body


def switch_record():
    hdr = struct.pack("<IIQBBH", 24, 0, 0, 0x40, 0, 0)
    return hdr + struct.pack("<I", crc32c(hdr[:20]))


class WalWriter:
    """Lays records into WAL pages the way PostgreSQL's CopyXLogRecordToWAL does."""

    def __init__(self, seg_size, first_seg=1):
        self.seg_size = seg_size
        self.pages = {}
        self.pos = first_seg * seg_size
        self._page(self.pos, 0)
        self.pos += 40

    def _page(self, lsn, rem_len):
        seg_start = lsn % self.seg_size == 0
        info = (0x2 if seg_start else 0) | (0x1 if rem_len else 0)
        p = bytearray(PAGE)
        struct.pack_into("<HHIQI", p, 0, 0xD110, info, 1, lsn, rem_len)
        if seg_start:
            struct.pack_into("<QII", p, 24, 0x1234, self.seg_size, PAGE)
        self.pages[lsn] = p
        return 40 if seg_start else 24

    def append(self, rec):
        self.pos = (self.pos + 7) & ~7
        if self.pos % PAGE == 0:
            self.pos += self._page(self.pos, 0)
        lsn = self.pos
        view = memoryview(rec)
        while True:
            page = self.pos - self.pos % PAGE
            off = self.pos % PAGE
            take = min(PAGE - off, len(view))
            self.pages[page][off:off + take] = view[:take]
            view = view[take:]
            self.pos += take
            if not len(view):
                break
            self.pos += self._page(self.pos, len(view))
        if rec[17] == 0 and rec[16] & 0xF0 == 0x40:  # XLOG_SWITCH: the rest of the segment is unused
            nxt = (self.pos + self.seg_size - 1) // self.seg_size * self.seg_size
            self.pos = nxt
            self._page(self.pos, 0)
            self.pos += 40
        return lsn

    def segments(self):
        first = min(self.pages) // self.seg_size
        last = max(self.pages) // self.seg_size
        out = []
        for s in range(first, last + 1):
            buf = bytearray(self.seg_size)
            for off in range(0, self.seg_size, PAGE):
                p = self.pages.get(s * self.seg_size + off)
                if p is not None:
                    buf[off:off + PAGE] = p
            out.append((s * self.seg_size, bytes(buf)))
        return out


def _decode(segs, seg_size, strict=False):
    dec = WalPageDecoder(seg_size, strict=strict)
    batches = [dec.feed(data, lsn) for lsn, data in segs]
    return dec, batches


rec_st = st.lists(st.tuples(st.integers(50, 20000), st.integers(0, 1000), st.booleans()), min_size=1, max_size=40)


@scaled(max_examples=60, deadline=None)
@given(recs=rec_st, seg_pages=st.sampled_from([2, 4, 8]))
def test_page_decoder_matches_writer(recs, seg_pages):
    seg_size = seg_pages * PAGE
    w = WalWriter(seg_size)
    want = []
    for size, blk, sw in recs:
        tag = (1663, 5, 16384, blk % 3, blk)
        rec = record(tag, size)
        want.append((w.append(rec), tag, len(rec)))
        if sw:
            want.append((w.append(switch_record()), None, 24))
    dec, batches = _decode(w.segments(), seg_size)
    rec_lsn = np.concatenate([b.rec_lsn for b in batches])
    assert rec_lsn.tolist() == [l for l, _, _ in want]
    assert np.concatenate([b.rec_tot_len for b in batches]).tolist() == [n for _, _, n in want]
    tags = np.concatenate([b.tags for b in batches])
    assert [tuple(t) for t in tags.tolist()] == [t for _, t, _ in want if t is not None]
    assert dec.done and "zero record length" in dec.end_reason


def test_split_header_and_segment_crossing():
    seg_size = 2 * PAGE
    w = WalWriter(seg_size)
    lsns = []
    # fill the first page to leave 8 bytes: the next record's header is split across pages
    first = record((1, 2, 3, 0, 1), PAGE - 40 - 8)
    lsns.append(w.append(first))
    assert PAGE - (w.pos % PAGE) == 8
    lsns.append(w.append(record((1, 2, 3, 0, 2), 300)))
    # a record larger than a segment crosses into the next one and the one after
    lsns.append(w.append(record((1, 2, 3, 0, 3), 3 * PAGE)))
    lsns.append(w.append(record((1, 2, 3, 0, 4), 100)))
    dec, batches = _decode(w.segments(), seg_size)
    assert np.concatenate([b.rec_lsn for b in batches]).tolist() == lsns
    assert len(batches) == 3 and len(batches[1]) == 0  # segment 2 holds only the middle of record 3
    # starting at a later segment skips the continued record and finds the next one
    segs = w.segments()
    dec2, b2 = _decode(segs[2:], seg_size)
    got = np.concatenate([b.rec_lsn for b in b2]).tolist()
    assert got == [l for l in lsns if l >= segs[2][0] + 40]


def test_damage_in_synthetic_wal():
    seg_size = 4 * PAGE
    w = WalWriter(seg_size)
    lsns = [w.append(record((1, 2, 3, 0, i), 3000)) for i in range(20)]
    segs = w.segments()
    # a flipped byte inside record 5
    data = bytearray(segs[0][1])
    off = lsns[5] - segs[0][0] + 100
    data[off] ^= 1
    bad = [(segs[0][0], bytes(data))] + segs[1:]
    dec, batches = _decode(bad, seg_size)
    assert np.concatenate([b.rec_lsn for b in batches]).tolist() == lsns[:5]
    assert dec.end_lsn == lsns[5] and "invalid record" in dec.end_reason
    with pytest.raises(CorruptRecordError):
        _decode(bad, seg_size, strict=True)
    # a continuation page that lost its contrecord flag
    k = next(i for i, l in enumerate(lsns) if (l % PAGE) + 3000 > PAGE)
    cont = (lsns[k] // PAGE + 1) * PAGE
    seg_i = cont // seg_size - segs[0][0] // seg_size
    data = bytearray(segs[seg_i][1])
    data[cont % seg_size + 2] &= ~0x1
    bad = list(segs)
    bad[seg_i] = (segs[seg_i][0], bytes(data))
    dec, batches = _decode(bad, seg_size)
    assert np.concatenate([b.rec_lsn for b in batches]).tolist() == lsns[:k]
    with pytest.raises(CorruptWalPageError):
        _decode(bad, seg_size, strict=True)
    # wrong segment size or order
    with pytest.raises(CorruptWalPageError):
        WalPageDecoder(seg_size).feed(segs[0][1][:-1], segs[0][0])
    d = WalPageDecoder(seg_size)
    d.feed(segs[0][1], segs[0][0])
    with pytest.raises(ValueError):
        d.feed(segs[0][1], segs[0][0] + 2 * seg_size)


def test_pg_wal_reader_on_written_segments(tmp_path):
    seg_size = 1 << 20
    w = WalWriter(seg_size, first_seg=3)
    lsns = [w.append(record((1663, 5, 16384 + i % 5, 0, i), 1000 + 37 * i)) for i in range(1500)]
    for lsn, data in w.segments():
        segno = lsn // seg_size
        (tmp_path / f"00000001{segno >> 12:08X}{segno & 0xFFF:08X}").write_bytes(data)
    r = PgWalReader(tmp_path)
    assert r.seg_size == seg_size
    b = r.read_all()
    assert b.rec_lsn.tolist() == lsns and b.tags[:, 4].tolist() == list(range(1500))
    assert r.read_all(start_lsn=lsns[700]).rec_lsn.tolist() == lsns[700:]
    assert [t[4] for _, tags, _, _, _ in r for t in tags][:3] == [0, 1, 2]
