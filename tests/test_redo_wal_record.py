"""The WAL record encoder against an independent struct-based parser of PostgreSQL 15's XLogRecord.

The parser below follows xlogrecord.h / DecodeXLogRecord field by field; it shares no code with
_ext (only the published constants), so an encoder bug cannot hide behind a matching decoder bug.
"""
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide.errors import CorruptWALRecordError
from logtide._ext import page as pg
from logtide._ext import redo, xlogwriter as xw
from logtide._ext import xlog_format as xf


def pg_parse(rec: bytes, meta: bool = False):
    tot_len, xid, prev, info, rmid, crc = struct.unpack_from("<IIQBB2xI", rec, 0)
    if not meta:
        assert tot_len == len(rec)
        assert crc32c(rec[:20], crc32c(rec[24:])) == crc
    pos, datatotal, blocks, main_len, last = 24, 0, [], 0, None
    while (pos < len(rec)) if meta else (tot_len - pos > datatotal):
        bid = rec[pos]
        if bid == 255:
            main_len = rec[pos + 1]
            pos += 2
            break
        if bid == 254:
            main_len = struct.unpack_from("<I", rec, pos + 1)[0]
            pos += 5
            break
        assert bid <= 32
        fork_flags, dlen = struct.unpack_from("<BH", rec, pos + 1)
        pos += 4
        b = {"id": bid, "fork": fork_flags & 0x0F, "flags": fork_flags & 0xF0, "dlen": dlen}
        if fork_flags & 0x10:
            b["bimg_len"], b["hole_offset"], b["bimg_info"] = struct.unpack_from("<HHB", rec, pos)
            pos += 5
            datatotal += b["bimg_len"]
        if fork_flags & 0x80:
            b["rnode"] = last["rnode"]
        else:
            b["rnode"] = struct.unpack_from("<III", rec, pos)
            pos += 12
        b["blkno"] = struct.unpack_from("<I", rec, pos)[0]
        pos += 4
        datatotal += dlen
        blocks.append(b)
        last = b
    if not meta:
        for b in blocks:
            if "bimg_len" in b:
                b["image"] = rec[pos:pos + b["bimg_len"]]
                pos += b["bimg_len"]
            b["data"] = rec[pos:pos + b["dlen"]]
            pos += b["dlen"]
    main = rec[pos:pos + main_len]
    assert pos + main_len == len(rec)
    return {"tot_len": tot_len, "xid": xid, "prev": prev, "info": info, "rmid": rmid, "blocks": blocks,
            "main": main}


def test_heap_insert_layout():
    rec = xw.heap_insert((1663, 5, 16384, 0, 42), 3, b"hello", xid=77, prev=1000, init=True)
    r = pg_parse(rec)
    assert (r["rmid"], r["info"], r["xid"], r["prev"]) == (xf.RM_HEAP, xf.HEAP_INSERT | xf.HEAP_INIT_PAGE, 77, 1000)
    (b,) = r["blocks"]
    assert b["rnode"] == (1663, 5, 16384) and b["blkno"] == 42 and b["fork"] == 0
    assert b["flags"] == xf.HAS_DATA | xf.WILL_INIT and b["data"] == b"hello"
    assert r["main"] == struct.pack("<HB", 3, 0)  # xl_heap_insert
    # 24 header + 4 block header + 12 rnode + 4 blkno + 2 short data header + 5 data + 3 main
    assert len(rec) == 24 + 4 + 12 + 4 + 2 + 5 + 3


def test_heap_update_two_blocks_same_rel():
    rec = xw.heap_update((1663, 5, 16384, 0, 9), 4, b"new!", (1663, 5, 16384, 0, 2), 7, xid=5)
    r = pg_parse(rec)
    b0, b1 = r["blocks"]
    assert (b0["id"], b0["blkno"], b0["data"]) == (0, 9, b"new!")
    assert (b1["id"], b1["blkno"], b1["dlen"]) == (1, 2, 0)
    assert b1["flags"] & xf.SAME_REL and not b0["flags"] & xf.SAME_REL
    assert struct.unpack("<IHBBIH", r["main"]) == (5, 7, 0, 0, 5, 4)  # xl_heap_update
    other_rel = xw.encode(xf.RM_HEAP, xf.HEAP_UPDATE, 1, 0,
                          [((1, 2, 3, 0, 1), b"t", None, False), ((1, 2, 4, 0, 1), None, None, False)], b"m")
    r = pg_parse(other_rel)
    assert not r["blocks"][1]["flags"] & xf.SAME_REL and r["blocks"][1]["rnode"] == (1, 2, 4)


def test_full_page_image_hole_and_long_main_data():
    p = pg.new_page()
    for i in range(1, 4):
        pg.add(p, i, bytes([i]) * 300)
    rec = xw.full_page_images([(1663, 5, 16384, 0, 1)], [bytes(p)])
    r = pg_parse(rec)
    (b,) = r["blocks"]
    lower = int.from_bytes(p[12:14], "little")
    upper = int.from_bytes(p[14:16], "little")
    assert b["bimg_info"] == xf.IMAGE_APPLY | xf.IMAGE_HAS_HOLE
    assert b["hole_offset"] == lower and b["bimg_len"] == 8192 - (upper - lower)
    assert b["image"] == bytes(p[:lower]) + bytes(p[upper:])
    assert (r["rmid"], r["info"]) == (xf.RM_XLOG, xf.FPI)
    # a page without a standard header is imaged whole, no hole
    raw = bytes(range(256)) * 32
    r = pg_parse(xw.full_page_images([(1, 1, 1, 0, 0)], [raw]))
    assert r["blocks"][0]["bimg_info"] == xf.IMAGE_APPLY and r["blocks"][0]["image"] == raw
    # main data over 255 bytes takes the long header
    rec = xw.encode(xf.RM_HEAP, 0, 1, 0, [], b"z" * 300)
    assert rec[24] == 254 and pg_parse(rec)["main"] == b"z" * 300
    rec = xw.encode(xf.RM_HEAP, 0, 1, 0, [], b"z" * 255)
    assert rec[24] == 255 and pg_parse(rec)["main"] == b"z" * 255
    assert len(xw.encode(xf.RM_HEAP, 0, 1, 0, [], b"")) == 24  # no main data, no header


block_st = st.tuples(
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 15), st.integers(0, 2**32 - 1)),
    st.one_of(st.none(), st.binary(min_size=1, max_size=300)),
    st.booleans(), st.booleans())


@given(st.lists(block_st, max_size=6), st.binary(max_size=600), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
@scaled(max_examples=200, deadline=None)
def test_encoder_matches_reference_parser_and_meta(blocks, main, xid, prev):
    image = pg.new_page()
    pg.add(image, 1, b"img")
    specs = [(t, d, bytes(image) if img else None, init) for t, d, img, init in blocks]
    rec = xw.encode(xf.RM_HEAP, 0x20, xid, prev, specs, main)
    r = pg_parse(rec)
    assert (r["xid"], r["prev"], r["main"]) == (xid, prev, main)
    assert len(r["blocks"]) == len(specs)
    for (t, d, img, init), b in zip(specs, r["blocks"]):
        assert b["rnode"] + (b["fork"], b["blkno"]) == t
        assert b["data"] == (d or b"")
        assert bool(b["flags"] & xf.WILL_INIT) == init
        assert bool(b["flags"] & xf.HAS_IMAGE) == (img is not None)
    # the in-tree decoder agrees with the reference parser
    d = redo.decode(rec)
    assert [x["tag"] for x in d["blocks"]] == [t for t, *_ in specs]
    assert d["main_data"] == (main or None)
    # WAL meta: the record minus block data and images; the header keeps tot_len and CRC
    meta = xw.wal_meta(rec)
    m = pg_parse(meta, meta=True)
    assert meta[:24] == rec[:24] and m["main"] == main
    assert [b["rnode"] + (b["fork"], b["blkno"]) for b in m["blocks"]] == [t for t, *_ in specs]
    assert [x["tag"] for x in redo.decode(meta, meta=True)["blocks"]] == [t for t, *_ in specs]


def test_meta_batches_and_tags():
    recs = [xw.heap_insert((1, 2, 3, 0, i), 1, b"x" * i, prev=i) for i in range(1, 50)]
    recs.append(xw.heap_update((1, 2, 3, 0, 100), 2, b"y", (1, 2, 3, 0, 101), 1))
    offs = np.cumsum([0] + [len(r) for r in recs]).astype(np.int64)
    metas, moffs = xw.wal_meta_many(np.frombuffer(b"".join(recs), dtype=np.uint8), offs)
    assert [metas[moffs[i]:moffs[i + 1]].tobytes() for i in range(len(recs))] == [xw.wal_meta(r) for r in recs]
    tags, idx = redo.meta_tags(metas, moffs)
    assert tags.tolist()[:3] == [[1, 2, 3, 0, 1], [1, 2, 3, 0, 2], [1, 2, 3, 0, 3]]
    assert tags.tolist()[-2:] == [[1, 2, 3, 0, 100], [1, 2, 3, 0, 101]]
    assert idx.tolist() == list(range(50)) + [49]


def test_meta_bad_input():
    rec = xw.heap_insert((1, 2, 3, 0, 1), 1, b"x")
    meta = xw.wal_meta(rec)
    for k in range(len(meta)):
        with pytest.raises(CorruptWALRecordError):
            redo.decode(meta[:k], meta=True)
    with pytest.raises(CorruptWALRecordError):
        xw.wal_meta(rec[:-1])
    with pytest.raises(CorruptWALRecordError):
        redo.meta_tags(np.frombuffer(meta[:-2], dtype=np.uint8), np.array([0, len(meta) - 2], dtype=np.int64))
    with pytest.raises(ValueError):
        xw.heap_insert((1, 2, 3, 16, 1), 1, b"x")  # fork does not fit 4 bits
    with pytest.raises(ValueError):
        xw.heap_insert((1, 2, 3, 0, 1), 0, b"x")


# ------------------------------------------------------------------ issue 3's decoder reads logtide's WAL
@given(st.lists(block_st, max_size=5), st.binary(max_size=400), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
@scaled(max_examples=150, deadline=None)
def test_xlogreader_decodes_encoder_output(blocks, main, xid, prev):
    from logtide._ext import xlogreader
    image = pg.new_page()
    pg.add(image, 1, b"img")
    specs = [(t, d, bytes(image) if img else None, init) for t, d, img, init in blocks]
    rec = xw.encode(xf.RM_HEAP, 0x20, xid, prev, specs, main)
    r = xlogreader.decode_record(rec)
    assert (r.tot_len, r.xid, r.prev, r.rmid, r.info) == (len(rec), xid, prev, xf.RM_HEAP, 0x20)
    assert r.main_data == main
    assert [tuple(b.tag) for b in r.blocks] == [t for t, *_ in specs]
    for (t, d, img, init), b in zip(specs, r.blocks):
        assert b.has_data == bool(d) and b.data_length == len(d or b"")
        assert b.has_image == (img is not None) and b.will_init == init
        if d:
            assert rec[b.data_offset:b.data_offset + b.data_length] == d
        if img is not None:
            assert b.apply_image and b.hole_offset + b.hole_length <= 8192
    # both sides agree on WAL meta, and the decoder reads the meta form too
    assert xlogreader.wal_meta(rec) == xw.wal_meta(rec)
    m = xlogreader.decode_record(xw.wal_meta(rec), meta=True)
    assert [tuple(b.tag) for b in m.blocks] == [t for t, *_ in specs]


def test_xlogreader_batch_over_a_heap_stream():
    from logtide._ext import xlogreader
    recs = [xw.heap_insert((1663, 5, 16384, 0, i % 7), i + 1, b"t" * (i + 1), xid=i, prev=i) for i in range(200)]
    recs += [xw.heap_update((1663, 5, 16384, 0, 1), 9, b"new", (1663, 5, 16384, 0, 2), 4, xid=5)]
    metas = [xw.wal_meta(r) for r in recs]
    lsns = np.arange(1, len(recs) + 1, dtype=np.uint64)
    full = xlogreader.decode_many(b"".join(recs), lsns=lsns)
    meta = xlogreader.decode_many(b"".join(metas), lsns=lsns, meta=True)
    tags, idx = redo.meta_tags(np.frombuffer(b"".join(metas), dtype=np.uint8),
                               np.cumsum([0] + [len(m) for m in metas]).astype(np.int64))
    for b in (full, meta):
        assert b.tags.tolist() == tags.tolist()
        assert b.lsn.tolist() == (idx + 1).tolist()
    bad = bytearray(recs[3])
    bad[30] ^= 1
    from logtide.errors import CorruptRecordError
    with pytest.raises(CorruptRecordError):
        xlogreader.decode_record(bytes(bad))
