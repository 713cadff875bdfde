"""The Cython pieces of the Spark jobs against simple models (hypothesis): segment_refs against
redo.decode record by record, checked_frames against the frame and record CRCs summed apart,
apply_located against redo.apply, page_owner against mmh3 is in test_spark_local.py. No Spark
needed."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, strategies as st
from hypothesis_profiles import scaled

from logtide._ext import redo
from logtide._ext import xlogwriter as xw
from logtide._ext.located_redo import apply_located
from logtide._ext import wal
from logtide._ext.crc32c import crc32c
from logtide._ext.record_checks import FRAME_BAD_CRC, FRAME_OK, RECORD_BAD_CRC, checked_frames
from logtide._ext.segment_refs import VERIFY_EVERY, VERIFY_NONE, segment_refs
from logtide.spark.errors import SegmentCorruptError
from logtide.spark.log_segments import WAL_DATA_OFFSET, block_refs, list_log_segments, scan_segment
from logtide.spark.wal_workload import write_workload

TAG = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2**32 - 1), st.integers(0, 3),
                st.integers(0, 2**32 - 1))
RECORD = st.one_of(
    st.builds(lambda t, o, d: xw.heap_insert(t, o, d), TAG, st.integers(1, 300), st.binary(min_size=1, max_size=64)),
    st.builds(lambda t, o: xw.heap_delete(t, o), TAG, st.integers(1, 300)),
    st.builds(lambda a, b, o, d: xw.heap_update(a, o, d, b, o), TAG, TAG, st.integers(1, 300),
              st.binary(min_size=1, max_size=64)),
    st.builds(lambda t: xw.full_page_images([t], [bytes(8192)]), TAG),
    st.builds(lambda x: xw.encode(1, 0, x, 0), st.integers(0, 2**32 - 1)),        # no block references
)


@scaled(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RECORD, min_size=1, max_size=120), st.integers(1, 130))
def test_segment_refs_match_record_decode(tmp_path_factory, records, cut):
    from logtide.engine.logservice import LogService
    d = tmp_path_factory.mktemp("refs")
    log = LogService.open(d, fsync="never", segment_size=2048)
    for i in range(0, len(records), 7):
        log.append_many(records[i:i + 7])
    log.close()
    want = []
    for lsn, rec in enumerate(records, 1):
        if lsn > cut:
            break
        dec = redo.decode(rec)
        if not dec["blocks"]:
            want.append((lsn, dec["xid"], dec["rmid"], 0, (0, 0, 0, 0, 0), False, len(rec)))
        for b in dec["blocks"]:
            want.append((lsn, dec["xid"], dec["rmid"], 1, b["tag"], b["image"] is not None, len(rec)))
    got = []
    segs = list_log_segments(str(d))
    assert len(segs) >= 1
    for seg in segs:
        s = scan_segment(seg)
        c = block_refs(s, cut, null_rows=True)
        for i in range(len(c["lsn"])):
            off, n = int(c["rec_off"][i]), int(c["rec_len"][i])
            k = int(c["lsn"][i]) - seg.first_lsn
            assert off == int(s.starts[k]) + WAL_DATA_OFFSET and bytes(memoryview(s.buf)[off:off + n]) == \
                records[int(c["lsn"][i]) - 1]
            got.append((int(c["lsn"][i]), int(c["xid"][i]), int(c["rmid"][i]), int(c["valid"][i]),
                        tuple(c["tags"][i].tolist()), bool(c["has_image"][i]), n))
    assert got == want


def test_apply_located_matches_per_record_redo(tmp_path):
    """Every page of a generated log, replayed by apply_located from the mmap'ed segments in chunks,
    equals redo.apply one record at a time."""
    w = write_workload(tmp_path / "w", 3000, seed=4, segment_size=60_000)
    rows = []
    bufs = []
    for k, seg in enumerate(list_log_segments(os.path.join(w.data_dir, "log"))):
        s = scan_segment(seg)
        bufs.append(s.buf)
        c = block_refs(s)
        rows.append((c["tags"], c["lsn"], np.full(len(c["lsn"]), k, np.int32), c["rec_off"], c["rec_len"]))
    tags, lsn, seg, off, ln = (np.concatenate([r[i] for r in rows]) for i in range(5))
    uniq, inv = np.unique(tags, axis=0, return_inverse=True)
    pages = np.zeros((len(uniq), 8192), np.uint8)
    for a in range(0, len(lsn), 997):        # chunks in LSN order: per page, records stay in order
        z = min(len(lsn), a + 997)
        res, applied, bad = apply_located(pages, inv.reshape(-1)[a:z].astype(np.int64),
                                          np.ascontiguousarray(tags[a:z]), bufs, seg[a:z], off[a:z].astype(np.int64),
                                          ln[a:z].astype(np.int64), lsn[a:z].astype(np.uint64))
        assert bad == -1 and applied == z - a
    for i, t in enumerate(map(tuple, uniq.tolist())):
        assert bytes(pages[i]) == bytes(w.pages[t]), t


def test_apply_located_checks_the_crc_where_flagged():
    """A record whose CRC does not match: refused (BAD_CRC, nothing applied) when its entry is
    flagged for the check, or with no flags at all; applied when a flag says an earlier entry of
    the same record was checked already."""
    tag = (1663, 5, 16384, 0, 2)
    rec = bytearray(xw.full_page_images([tag], [bytes(8192)]))
    rec[-3] ^= 0x10   # a byte of the image
    buf = np.frombuffer(bytes(rec), np.uint8)
    args = (np.zeros(1, np.int64), np.array([tag], np.uint32), [buf], np.zeros(1, np.int32),
            np.zeros(1, np.int64), np.array([len(rec)], np.int64), np.array([9], np.uint64))
    for flags in (None, np.ones(1, np.uint8)):
        pages = np.zeros((1, 8192), np.uint8)
        res, applied, bad = apply_located(pages, *args, flags)
        assert (bad, applied, int(res[0])) == (0, 0, redo.BAD_CRC) and not pages.any()
    pages = np.zeros((1, 8192), np.uint8)
    res, applied, bad = apply_located(pages, *args, np.zeros(1, np.uint8))
    assert (bad, applied) == (-1, 1) and pages.any()
    with pytest.raises(ValueError):
        apply_located(pages, *args, np.zeros(2, np.uint8))


def _log_of(tmp_path, records):
    from logtide.engine.logservice import LogService
    log = LogService.open(tmp_path, fsync="never")
    log.append_many(records)
    log.close()
    segs = list_log_segments(str(tmp_path))
    assert len(segs) == 1
    return scan_segment(segs[0])       # the frames are intact: the log framed the damaged bytes


def _damaged(rec: bytes) -> bytes:
    b = bytearray(rec)
    b[-1] ^= 0x5A                       # last byte of the record's data: it still decodes
    return bytes(b)


@pytest.mark.parametrize("blockless", [False, True])
def test_segment_refs_verify_modes(tmp_path, blockless):
    """VERIFY_EVERY refuses a record whose own CRC-32C fails, with or without block references;
    VERIFY_NONE leaves that to the scan."""
    tag = (1663, 5, 16384, 0, 2)
    bad = xw.encode(1, 0, 77, 0) if blockless else xw.heap_insert(tag, 3, b"tuple bytes")
    records = [xw.heap_insert(tag, 1, b"first"), _damaged(bad), xw.heap_insert(tag, 2, b"third")]
    s = _log_of(tmp_path, records)
    args = (s.buf, s.starts, s.types, s.lengths, s.seg.first_lsn)
    cols, bad_frame, code = segment_refs(*args, 2**64 - 1, VERIFY_EVERY)
    assert bad_frame == 1
    cols, bad_frame, code = segment_refs(*args, 2**64 - 1, VERIFY_NONE)
    assert bad_frame == -1 and sorted(set(cols["lsn"].tolist())) == ([1, 3] if blockless else [1, 2, 3])
    with pytest.raises(SegmentCorruptError, match="checksum"):
        block_refs(s)
    with pytest.raises(ValueError):
        segment_refs(*args, 2**64 - 1, 2)


@pytest.mark.parametrize("blockless", [False, True])
def test_scan_with_records_refuses_a_damaged_record(tmp_path, blockless):
    """scan_segment(records=True) checks each record's own CRC-32C with its frame's: a record the
    log framed intact but whose own CRC fails raises SegmentCorruptError naming its LSN, and the
    block references of a segment so scanned are not summed again."""
    tag = (1663, 5, 16384, 0, 2)
    bad = xw.encode(1, 0, 77, 0) if blockless else xw.heap_insert(tag, 3, b"tuple bytes")
    _log_of(tmp_path, [xw.heap_insert(tag, 1, b"first"), _damaged(bad), xw.heap_insert(tag, 2, b"third")])
    seg = list_log_segments(str(tmp_path))[0]
    with pytest.raises(SegmentCorruptError, match=r"LSN 2 \(offset \d+\): incorrect resource manager data checksum"):
        scan_segment(seg, records=True)
    good = tmp_path / "good"
    _log_of(good, [xw.heap_insert(tag, 1, b"first"), bad, xw.heap_insert(tag, 2, b"third")])
    s = scan_segment(list_log_segments(str(good))[0], records=True)
    assert s.records_checked and sorted(set(block_refs(s)["lsn"].tolist())) == ([1, 3] if blockless else [1, 2, 3])


def _model_checks(buf: bytes, starts, types, lengths) -> tuple:
    """checked_frames' answer from the two CRCs summed apart, with the plain crc32c."""
    for i, (at, t, n) in enumerate(zip(starts.tolist(), types.tolist(), lengths.tolist())):
        frame = buf[at:at + wal.HEADER_SIZE + n]
        if int.from_bytes(frame[4:8], "little") != wal.frame_crc(frame):
            return i, FRAME_BAD_CRC
        rec = frame[WAL_DATA_OFFSET:]
        if t != 0 or len(rec) < 24 or int.from_bytes(rec[:4], "little") != len(rec):
            continue
        if int.from_bytes(rec[20:24], "little") != crc32c(rec[:20], crc32c(rec[24:])):
            return i, RECORD_BAD_CRC
    return -1, FRAME_OK


@scaled(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RECORD, min_size=1, max_size=40), st.lists(st.tuples(st.integers(0, 2**31), st.integers(1, 255)),
                                                           max_size=3),
       st.lists(st.integers(0, 2**31), max_size=2))
def test_checked_frames_match_the_crcs_summed_apart(tmp_path_factory, records, flips, damaged):
    """Against a model: records (some damaged before the log framed them) in a segment whose bytes
    are then flipped at random; the first frame or record that fails, as checked_frames finds it in
    one pass, is the one the frame CRC and the record CRC summed apart find."""
    records = list(records)
    for k in damaged:
        records[k % len(records)] = _damaged(records[k % len(records)])
    d = tmp_path_factory.mktemp("checks")
    seg = _log_of(d, records).seg
    raw = bytearray(open(seg.path, "rb").read())
    used = int(_log_of_end(raw, seg.first_lsn))
    for at, x in flips:
        raw[at % used] ^= x
    buf = bytes(raw)
    starts, types, lengths, _, _ = wal.scan(np.frombuffer(buf, np.uint8), 0, seg.first_lsn, verify=False)
    assert checked_frames(np.frombuffer(buf, np.uint8), starts, types, lengths) == \
        _model_checks(buf, starts, types, lengths)


def _log_of_end(raw: bytearray, first_lsn: int) -> int:
    """Where the frames of an intact segment end (the rest is the zero-filled preallocation)."""
    return wal.scan(np.frombuffer(bytes(raw), np.uint8), 0, first_lsn)[3]


def test_checked_frames_bad_input():
    with pytest.raises(ValueError):
        checked_frames(np.zeros(10, np.uint8), np.zeros(1, np.uint64), np.zeros(1, np.uint32), np.zeros(1, np.uint32))
    with pytest.raises(ValueError):
        checked_frames(np.zeros(40, np.uint8), np.zeros(1, np.uint64), np.zeros(2, np.uint32), np.zeros(1, np.uint32))
