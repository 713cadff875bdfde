"""Damaged logs: a torn or flipped tail is cut at the last good record; damage mid-log is an error."""
from __future__ import annotations

import logging
import os

import pytest

from logtide import CorruptLogError, LogService
from logtide._ext import wal
from logtide.errors import CorruptionError

pytestmark = pytest.mark.timeout(120)


def make_log(path, n=50, segment_size=64 << 20, size=40):
    with LogService.open(path, segment_size=segment_size) as svc:
        for i in range(n):
            svc.append(bytes([i]) * size)
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


FRAME = 20 + 12 + 40


def frames_end(path) -> int:
    """Where the segment's frames end: its file may go on with pre-allocated zeros, only zeros."""
    with open(path, "rb") as f:
        raw = f.read()
    end, status = wal.scan(raw, 0, int(os.path.basename(path)[:20]))[3:]
    assert status == wal.OK and raw[end:] == bytes(len(raw) - end)
    return end


def payloads(svc):
    recs, lsn = [], 1
    while lsn <= svc.get_latest_lsn():
        got, lsn = svc.read(lsn, 1 << 20)
        recs += got
    return [r.payload for r in recs]


@pytest.mark.parametrize("cut", [1, 7, 19, 20, 30, FRAME - 1])
def test_truncated_tail_is_cut(tmp_path, caplog, cut):
    (seg,) = make_log(tmp_path)
    os.truncate(seg, 50 * FRAME - cut)
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path) as svc:
            assert svc.get_latest_lsn() == 49
            assert payloads(svc) == [bytes([i]) * 40 for i in range(49)]
            assert svc.append(b"after") == 50  # the LSN of the lost record is reused: it was never acknowledged
    assert "cut a torn tail" in caplog.text
    assert frames_end(seg) == 49 * FRAME + 20 + 12 + 5
    with LogService.open(tmp_path) as svc:
        assert payloads(svc)[-1] == b"after"


@pytest.mark.parametrize("where", [0, 3, 4, 9, 17, 25, FRAME - 1])
def test_flipped_byte_in_the_tail_is_cut(tmp_path, caplog, where):
    (seg,) = make_log(tmp_path)
    flip(seg, 49 * FRAME + where)
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path) as svc:
            assert svc.get_latest_lsn() == 49
            assert payloads(svc) == [bytes([i]) * 40 for i in range(49)]
    assert "cut a torn tail" in caplog.text


@pytest.mark.parametrize("where", [0, 5, 12, 30])
def test_flipped_byte_mid_log_is_an_error(tmp_path, where):
    (seg,) = make_log(tmp_path)
    size = os.path.getsize(seg)
    flip(seg, 20 * FRAME + where)
    with pytest.raises(CorruptLogError) as err:
        LogService.open(tmp_path)
    assert err.value.segment == os.path.basename(seg) and err.value.offset == 20 * FRAME
    assert os.path.basename(seg) in str(err.value) and str(20 * FRAME) in str(err.value)
    assert os.path.getsize(seg) == size  # nothing was cut


def test_corruption_in_an_older_segment_is_an_error(tmp_path):
    segs = make_log(tmp_path, n=200, segment_size=2048)
    assert len(segs) > 2
    flip(segs[0], os.path.getsize(segs[0]) - 3)  # even the last record of an older segment
    with pytest.raises(CorruptLogError, match=os.path.basename(segs[0])):
        LogService.open(tmp_path)


def test_missing_segment_is_an_error(tmp_path):
    segs = make_log(tmp_path, n=200, segment_size=2048)
    os.unlink(segs[1])
    with pytest.raises(CorruptLogError, match="missing"):
        LogService.open(tmp_path)


def test_corruption_found_by_a_read_is_an_error(tmp_path):
    (seg,) = make_log(tmp_path)
    with LogService.open(tmp_path) as svc:
        flip(seg, 10 * FRAME + 25)  # bit rot after open
        with pytest.raises(CorruptLogError, match="offset"):
            svc.read(5, 1 << 20)
        assert [r.lsn for r in svc.read(12, 1 << 20)[0]][:1] == [12]  # the rest still reads


def test_garbage_after_the_tail_is_cut(tmp_path):
    (seg,) = make_log(tmp_path)
    with open(seg, "ab") as f:
        f.write(os.urandom(3000))
    with LogService.open(tmp_path) as svc:
        assert svc.get_latest_lsn() == 50
    assert frames_end(seg) == 50 * FRAME


def test_zero_filled_tail_is_cut(tmp_path):
    (seg,) = make_log(tmp_path)
    with open(seg, "ab") as f:
        f.write(b"\0" * 8192)  # what a crash can leave after the file size grew
    with LogService.open(tmp_path) as svc:
        assert svc.get_latest_lsn() == 50


def test_corrupt_state_file_is_an_error(tmp_path):
    make_log(tmp_path, n=3)
    with LogService.open(tmp_path) as svc:
        svc.truncate(2)
    state = tmp_path / "logservice.state"
    flip(state, 12)
    with pytest.raises(CorruptionError):
        LogService.open(tmp_path)


def _wal_log(path, records):
    with LogService.open(path) as svc:
        for r in records:
            svc.append(r)
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))


def _wal_records(n):
    from logtide._ext import xlogwriter as xw
    return [xw.heap_insert((1663, 5, 16384, 0, i % 5), 1 + i % 50, bytes([i]) * 60) for i in range(n)]


@pytest.mark.parametrize("checked", [False, True])
def test_check_records_refuses_a_wal_record_damaged_inside_an_intact_frame(tmp_path, checked):
    """check_records: a WAL record whose frame is intact but whose own CRC-32C fails (framed
    damaged: a writer's fault, not the disk's) is CorruptLogError at open, naming its LSN; a log
    opened without it holds the record as data, as any payload."""
    recs = _wal_records(20)
    bad = bytearray(recs[12])
    bad[-3] ^= 0x40
    recs[12] = bytes(bad)
    _wal_log(tmp_path, recs)
    if checked:
        with pytest.raises(CorruptLogError, match=r"LSN 13 .*incorrect resource manager data checksum"):
            LogService.open(tmp_path, check_records=True)
    else:
        with LogService.open(tmp_path) as svc:
            assert svc.records_checked_through == 0 and payloads(svc)[12] == recs[12]


@pytest.mark.parametrize("where", ["header", "body"])
def test_check_records_still_cuts_a_torn_tail_and_refuses_damage_mid_log(tmp_path, caplog, where):
    """With check_records the frames' CRC-32C is derived from the records' single pass: a flipped
    byte in the last frame is still a torn tail, cut; the same byte in a middle frame is still
    CorruptLogError; an intact log opens with every record checked."""
    recs = _wal_records(30)
    (seg,) = _wal_log(tmp_path / "intact", recs)
    with LogService.open(tmp_path / "intact", check_records=True) as svc:
        assert svc.records_checked_through == 30 and payloads(svc) == recs
    end = frames_end(seg)
    last = end - (20 + 12 + len(recs[-1]))
    at = {"header": 2, "body": 20 + 12 + 30}[where]
    (seg,) = _wal_log(tmp_path / "tail", recs)
    flip(seg, last + at)
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path / "tail", check_records=True) as svc:
            assert svc.get_latest_lsn() == 29 and payloads(svc) == recs[:29]
    assert "cut a torn tail" in caplog.text
    (seg,) = _wal_log(tmp_path / "mid", recs)
    flip(seg, (20 + 12 + len(recs[0])) * 3 + at)
    with pytest.raises(CorruptLogError):
        LogService.open(tmp_path / "mid", check_records=True)


def test_check_records_must_be_a_bool(tmp_path):
    from logtide.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="check_records"):
        LogService.open(tmp_path, check_records="yes")
