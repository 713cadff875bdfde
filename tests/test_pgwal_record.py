"""The XLogRecord decoder against an independent Python encoder of PostgreSQL 15's record layout."""
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide.errors import CorruptRecordError
from logtide._ext import xlogreader as xr

BLCKSZ = 8192


def encode(blocks, main=b"", xid=7, prev=0x1000, info=0x00, rmid=10, origin=None, toplevel=None, crc=True):
    """A full record the way XLogRecordAssemble lays it out.

    blocks: dicts with id, tag (spc, db, rel, fork, block), data (bytes), image (None or dict with
    bytes, hole_offset, hole_length, compressed, apply), same_rel (bool).
    """
    head = bytearray()
    payload = bytearray()
    prev_rel = None
    for b in blocks:
        spc, db, rel, fork, blk = b["tag"]
        flags = fork
        img = b.get("image")
        if img is not None:
            flags |= 0x10
        if b["data"]:
            flags |= 0x20
        same = b.get("same_rel") and prev_rel == (spc, db, rel)
        if same:
            flags |= 0x80
        if b.get("will_init"):
            flags |= 0x40
        head += struct.pack("<BBH", b["id"], flags, len(b["data"]))
        if img is not None:
            bimg_info = (0x01 if img["hole_length"] else 0) | (0x02 if img.get("apply") else 0)
            if img["compressed"]:
                bimg_info |= 0x04
            head += struct.pack("<HHB", len(img["bytes"]), img["hole_offset"], bimg_info)
            if img["compressed"] and img["hole_length"]:
                head += struct.pack("<H", img["hole_length"])
            payload += img["bytes"]
        if not same:
            head += struct.pack("<III", spc, db, rel)
        head += struct.pack("<I", blk)
        payload += b["data"]
        prev_rel = (spc, db, rel)
    if origin is not None:
        head += struct.pack("<BH", 253, origin)
    if toplevel is not None:
        head += struct.pack("<BI", 252, toplevel)
    if main:
        head += struct.pack("<BB", 255, len(main)) if len(main) < 256 else struct.pack("<BI", 254, len(main))
    body = bytes(head) + bytes(payload) + main
    tot = 24 + len(body)
    hdr = struct.pack("<IIQBBH", tot, xid, prev, info, rmid, 0)
    c = crc32c(hdr[:20], crc32c(body)) if crc else 0
    return hdr + struct.pack("<I", c) + body


def image(kind, rnd):
    if kind == "full":
        return {"bytes": rnd.randbytes(BLCKSZ), "hole_offset": 0, "hole_length": 0, "compressed": False}
    if kind == "hole":
        off, ln = 100, 4000
        return {"bytes": rnd.randbytes(BLCKSZ - ln), "hole_offset": off, "hole_length": ln, "compressed": False,
                "apply": True}
    return {"bytes": rnd.randbytes(300), "hole_offset": 64, "hole_length": 1000, "compressed": True}


tag_st = st.tuples(st.sampled_from([0, 1663, 1664]), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                   st.integers(0, 3), st.integers(0, 2**32 - 1))
block_st = st.fixed_dictionaries({
    "tag": tag_st, "data": st.binary(max_size=300), "image": st.sampled_from([None, "full", "hole", "compressed"]),
    "same_rel": st.booleans(), "will_init": st.booleans()})


@scaled(max_examples=200, deadline=None)
@given(blocks=st.lists(block_st, max_size=5), ids=st.lists(st.integers(0, 32), min_size=5, max_size=5, unique=True),
       main=st.binary(max_size=600), xid=st.integers(0, 2**32 - 1), info=st.integers(0, 255),
       rmid=st.sampled_from([0, 1, 9, 10, 11, 21, 128, 255]), origin=st.one_of(st.none(), st.integers(0, 65535)),
       toplevel=st.one_of(st.none(), st.integers(1, 2**32 - 1)))
def test_decode_matches_encoder(blocks, ids, main, xid, info, rmid, origin, toplevel):
    import random
    rnd = random.Random(len(main) + xid)
    ids = sorted(ids)[: len(blocks)]
    spec = []
    for b, i in zip(blocks, ids):
        b = dict(b, id=i)
        if b["same_rel"] and spec:  # SAME_REL only means something when the rel repeats
            p = spec[-1]["tag"]
            b["tag"] = (p[0], p[1], p[2], b["tag"][3], b["tag"][4])
        b["image"] = image(b["image"], rnd) if b["image"] else None
        spec.append(b)
    rec = encode(spec, main, xid=xid, info=info, rmid=rmid, origin=origin, toplevel=toplevel)
    d = xr.decode_record(rec)
    assert (d.tot_len, d.xid, d.info, d.rmid) == (len(rec), xid, info, rmid)
    assert d.origin == origin and d.toplevel_xid == (toplevel or 0)
    assert d.main_data == main and d.main_length == len(main)
    assert len(d.blocks) == len(spec)
    for got, want in zip(d.blocks, spec):
        assert got.block_id == want["id"] and tuple(got.tag) == want["tag"]
        assert got.data_length == len(want["data"]) and got.has_data == bool(want["data"])
        if want["data"]:
            assert rec[got.data_offset:got.data_offset + got.data_length] == want["data"]
        img = want["image"]
        assert got.has_image == (img is not None)
        if img:
            assert rec[got.image_offset:got.image_offset + got.bimg_len] == img["bytes"]
            assert (got.hole_offset, got.hole_length, got.compressed) == (
                img["hole_offset"], img["hole_length"], img["compressed"])
        assert got.will_init == bool(want.get("will_init"))
    # the WAL-meta form keeps headers and main data, drops block data, and decodes to the same refs
    meta = xr.wal_meta(rec)
    assert len(meta) == len(rec) - d.blocks_length
    m = xr.decode_record(meta, meta=True)
    assert m.blocks == d.blocks and m.main_data == main and m.tot_len == d.tot_len
    # the batch form gives the same rows
    batch = xr.decode_many(rec + rec, base_lsn=1000)
    assert list(batch.rec_lsn) == [1000, 1000 + len(rec)]
    assert batch.tags.tolist() == [list(b["tag"]) for b in spec] * 2
    assert set(batch.rmid.tolist()) <= {rmid}


def test_crc_is_postgres_order():
    rec = bytearray(encode([{"id": 0, "tag": (1663, 5, 16384, 0, 3), "data": b"abc"}], b"main", crc=False))
    c = xr.set_record_crc(rec)
    assert c == crc32c(bytes(rec[:20]), crc32c(bytes(rec[24:])))
    assert xr.decode_record(rec).crc == c


def test_every_flipped_byte_is_detected():
    rec = encode([{"id": 0, "tag": (1663, 5, 16384, 0, 3), "data": b"payload"},
                  {"id": 1, "tag": (1663, 5, 16384, 1, 9), "data": b"", "same_rel": True}], b"main data")
    for i in range(len(rec)):
        bad = bytearray(rec)
        bad[i] ^= 0x40
        with pytest.raises(CorruptRecordError):
            xr.decode_record(bytes(bad))


@pytest.mark.parametrize("cut", [0, 1, 23, 24, 30])
def test_truncated_record_is_rejected(cut):
    rec = encode([{"id": 0, "tag": (1663, 5, 16384, 0, 3), "data": b"payload"}], b"main")
    with pytest.raises(CorruptRecordError):
        xr.decode_record(rec[:cut])
    with pytest.raises(CorruptRecordError):
        xr.decode_record(rec[:-1])


def test_malformed_headers_are_rejected_without_crc():
    def bad(blocks_raw, main=b""):
        body = blocks_raw + main
        hdr = struct.pack("<IIQBBH", 24 + len(body), 1, 0, 0, 10, 0)
        return hdr + struct.pack("<I", crc32c(hdr[:20], crc32c(body))) + body
    cases = [
        struct.pack("<BBH", 0, 0x80, 0) + struct.pack("<I", 1),                      # SAME_REL first
        struct.pack("<BBH", 0, 0x20, 0) + struct.pack("<IIII", 1, 2, 3, 4),          # HAS_DATA, len 0
        struct.pack("<BBH", 0, 0x00, 5) + struct.pack("<IIII", 1, 2, 3, 4) + b"xxxxx",  # len without flag
        struct.pack("<BBH", 40, 0, 0) + struct.pack("<IIII", 1, 2, 3, 4),            # block id 40
        struct.pack("<BBH", 1, 0, 0) + struct.pack("<IIII", 1, 2, 3, 4) * 1
        + struct.pack("<BBH", 1, 0, 0) + struct.pack("<IIII", 1, 2, 3, 4),            # repeated id
        struct.pack("<BBH", 0, 0x10, 0) + struct.pack("<HHB", 100, 0, 0) + struct.pack("<IIII", 1, 2, 3, 4)
        + b"x" * 100,                                                                 # short image, no hole
        struct.pack("<BBH", 0, 0, 0),                                                 # header cut
    ]
    for raw in cases:
        with pytest.raises(CorruptRecordError):
            xr.decode_record(bad(raw))
    hdr = struct.pack("<IIQBBH", 24, 1, 0, 0, 50, 0)  # rmid 50: neither builtin nor custom
    with pytest.raises(CorruptRecordError, match="resource manager"):
        xr.decode_record(hdr + struct.pack("<I", crc32c(hdr[:20])))


def test_decode_many_with_lsns_and_alignment():
    recs = [encode([{"id": 0, "tag": (1663, 5, 16384 + i, 0, i), "data": b"d" * i}], b"m" * (i + 1), xid=i)
            for i in range(1, 50)]
    padded = b"".join(r + b"\0" * ((-len(r)) % 8) for r in recs)
    b = xr.decode_many(padded, align=8, base_lsn=0x100000000)
    assert len(b) == 49 and b.rec_xid.tolist() == list(range(1, 50))
    lsns = np.arange(10, 59, dtype=np.uint64)
    b2 = xr.decode_many(b"".join(recs), lsns=lsns)
    assert b2.lsn.tolist() == lsns.tolist() and b2.tags[:, 2].tolist() == [16384 + i for i in range(1, 50)]
    got = list(b2.records())
    assert got[0][0] == 10 and tuple(got[0][1][0]) == (1663, 5, 16385, 0, 1)
    with pytest.raises(CorruptRecordError, match="LSNs"):
        xr.decode_many(b"".join(recs), lsns=lsns[:-1])
    bad = bytearray(b"".join(recs))
    bad[len(recs[0]) + 30] ^= 1
    with pytest.raises(CorruptRecordError, match="record 1 at offset"):
        xr.decode_many(bytes(bad))


def test_wrong_types():
    with pytest.raises(TypeError):
        xr.decode_record("not bytes")
    with pytest.raises(TypeError):
        xr.decode_many(12345)
