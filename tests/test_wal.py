"""The Cython frame codec against a plain-Python reference of the format (docs/wal_format.md)."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide._ext import wal


def ref_frame(lsn: int, rtype: int, data: bytes) -> bytes:
    """[u32 length][u32 crc32c][u64 lsn][u32 type][data], CRC over everything but the CRC field."""
    length = struct.pack("<I", len(data))
    rest = struct.pack("<QI", lsn, rtype) + data
    return length + struct.pack("<I", crc32c(length + rest)) + rest


def ref_scan(buf: bytes, first_lsn: int):
    """Reference scan: good frames until the first bad one, and why it stopped. Only zero bytes from a
    frame position to the end are the (pre-allocated) clean end."""
    pos, out = 0, []
    while True:
        if pos < len(buf) and not any(buf[pos:]):
            return out, pos, wal.OK
        if len(buf) - pos < 20:
            return out, pos, (wal.OK if pos == len(buf) else wal.SHORT_HEADER)
        n, crc, lsn, t = struct.unpack_from("<IIQI", buf, pos)
        if n > len(buf) - pos - 20:
            return out, pos, wal.SHORT_DATA
        if crc != crc32c(buf[pos:pos + 4] + buf[pos + 8:pos + 20 + n]):
            return out, pos, wal.BAD_CRC
        if lsn != first_lsn + len(out):
            return out, pos, wal.BAD_LSN
        out.append((pos, t, bytes(buf[pos + 20:pos + 20 + n])))
        pos += 20 + n


payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=40)


@scaled(max_examples=200, deadline=None)
@given(payloads, st.integers(0, 2**40), st.integers(0, 2**32 - 1), st.binary(max_size=16))
def test_encode_matches_reference(ps, first, rtype, prefix):
    frames, starts = wal.encode(first, rtype, prefix, ps)
    ref = b"".join(ref_frame(first + i, rtype, prefix + p) for i, p in enumerate(ps))
    assert frames == ref
    assert starts.tolist() == [sum(20 + len(prefix) + len(q) for q in ps[:i]) for i in range(len(ps))]


@scaled(max_examples=300, deadline=None)
@given(payloads, st.integers(1, 2**40), st.data())
def test_scan_matches_reference_on_damaged_buffers(ps, first, data):
    frames, _ = wal.encode(first, 0, b"", ps)
    buf = bytearray(frames)
    damage = data.draw(st.sampled_from(["none", "flip", "cut", "garbage", "zeros", "zeros+garbage"]))
    if damage == "flip" and buf:
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del buf[data.draw(st.integers(0, len(buf))):]
    elif damage == "garbage":
        buf += data.draw(st.binary(min_size=1, max_size=64))
    elif damage.startswith("zeros"):  # a pre-allocated tail, perhaps with a torn frame or garbage in it
        if data.draw(st.booleans()):
            del buf[data.draw(st.integers(0, len(buf))):]
        buf += bytes(data.draw(st.integers(1, 100)))
        if damage == "zeros+garbage":
            buf += data.draw(st.binary(min_size=1, max_size=64)) + bytes(data.draw(st.integers(0, 30)))
    starts, types, lengths, end, status = wal.scan(bytes(buf), 0, first)
    good, ref_end, ref_status = ref_scan(bytes(buf), first)
    assert status == ref_status and end == ref_end
    assert starts.tolist() == [g[0] for g in good]
    assert lengths.tolist() == [len(g[2]) for g in good]
    recs = wal.decode(bytes(buf), starts, types, lengths, first, lambda lsn, t, d: (lsn, t, d))
    assert [r[2] for r in recs] == [g[2] for g in good]
    assert [r[0] for r in recs] == list(range(first, first + len(good)))


def test_scan_reports_each_kind_of_damage():
    frames, starts = wal.encode(10, 1, b"", [b"a" * 10, b"b" * 10, b"c" * 10])
    assert wal.scan(frames, 0, 10)[3:] == (len(frames), wal.OK)
    assert wal.scan(frames, 0, 11)[4] == wal.BAD_LSN
    assert wal.scan(frames[:-5], 0, 10)[3:] == (int(starts[2]), wal.SHORT_DATA)
    assert wal.scan(frames[:int(starts[2]) + 7], 0, 10)[3:] == (int(starts[2]), wal.SHORT_HEADER)
    bad = bytearray(frames)
    bad[int(starts[1]) + 25] ^= 0xFF
    assert wal.scan(bytes(bad), 0, 10)[3:] == (int(starts[1]), wal.BAD_CRC)
    assert wal.scan(frames, 0, 10, max_length=5)[4] == wal.BAD_LENGTH
    # limits: record count and data budget (at least one record)
    assert len(wal.scan(frames, 0, 10, max_records=2)[0]) == 2
    assert len(wal.scan(frames, 0, 10, max_bytes=0)[0]) == 1
    assert len(wal.scan(frames, 0, 10, max_bytes=20)[0]) == 2
    assert wal.scan(frames, 0, 10, max_bytes=20)[4] == wal.SIZE_LIMIT


def test_find_frame_resyncs_after_damage():
    frames, starts = wal.encode(5, 0, b"", [b"x" * 30] * 4)
    bad = bytearray(frames)
    bad[int(starts[1]) + 2] ^= 0x40  # the length field of LSN 6
    assert wal.find_frame(bytes(bad), int(starts[1]) + 1, 6) == int(starts[2])
    assert wal.find_frame(bytes(bad), int(starts[3]) + 1, 6) == -1
    assert wal.find_frame(b"\0" * 4096, 0, 1) == -1  # zeros are never a frame (LSN 0)


@scaled(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=60), st.data())
def test_fit_matches_a_linear_walk(sizes, data):
    starts = np.zeros(len(sizes) + 1, dtype=np.uint64)
    starts[1:] = np.cumsum([20 + s for s in sizes])
    i = data.draw(st.integers(0, len(sizes) - 1))
    count = data.draw(st.integers(0, len(sizes) - i))
    budget = data.draw(st.integers(0, 3000))
    k, total = 0, 0
    while k < count and (k == 0 or total + sizes[i + k] <= budget):
        if k == 0 and sizes[i] > budget:
            k = 1
            break
        total += sizes[i + k]
        k += 1
    assert wal.fit(starts, i, count, budget) == k


def test_frame_crc_and_bad_payload_types():
    frames, _ = wal.encode(1, 0, b"", [b"abc"])
    assert wal.frame_crc(frames) == struct.unpack_from("<I", frames, 4)[0]
    with pytest.raises(TypeError):
        wal.encode(1, 0, b"", ["not bytes"])
    with pytest.raises(ValueError):
        wal.scan(b"", 5, 1)


@scaled(max_examples=100, deadline=None)
@given(st.integers(0, 30), st.integers(0, 64), st.integers(1, 2**40), st.binary(max_size=12), st.data())
def test_encode_rows_matches_encode(n, width, first, prefix, data):
    rows = np.frombuffer(data.draw(st.binary(min_size=n * width, max_size=n * width)), dtype=np.uint8)
    rows = rows.reshape(n, width)
    a, sa = wal.encode_rows(first, 3, prefix, rows)
    b, sb = wal.encode(first, 3, prefix, [r.tobytes() for r in rows])
    assert a == b and sa.tolist() == sb.tolist()
