# cython: language_level=3
"""The CRC-32C of a scanned segment's frames and of the XLogRecords they hold, in one pass.

A user frame's CRC covers its header, the 12-byte data prefix and the whole XLogRecord; the
record's own CRC covers the record's body, then its header up to the CRC field. Both run over the
body, nearly all of the bytes: `checked_frames` sums the body once and derives the frame's CRC
from that sum (crc32c_combine), so a replay checks every record with one pass over its bytes
rather than a pass for the frame at the scan and another for the record at the redo.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t
cimport cython

from logtide._ext.crc32c cimport crc32c_combine, crc32c_update
from logtide._ext.wal cimport WAL_HEADER_SIZE, WAL_OFF_CRC, _frame_crc, _frame_crc_start, _get32
from logtide._ext.xlog_format cimport SIZE_OF_XLOG_RECORD, XLOG_RECORD_CRC_OFFSET
from logtide._ext import wal

cdef enum:
    _PREFIX = 12          # a user frame's data prefix: u32 update type + u64 replica id
    _USER_RECORD = 0

cdef enum:
    _FRAME_OK = 0
    _FRAME_BAD_CRC = 1    # the frame's own CRC fails: damaged or torn
    _RECORD_BAD_CRC = 2   # the frame is intact, the record it holds fails its CRC
FRAME_OK = _FRAME_OK
FRAME_BAD_CRC = _FRAME_BAD_CRC
RECORD_BAD_CRC = _RECORD_BAD_CRC


@cython.boundscheck(False)
@cython.wraparound(False)
def checked_frames(const uint8_t[::1] buf, const uint64_t[::1] starts, const uint32_t[::1] types,
                   const uint32_t[::1] lengths) -> tuple:
    """Check the frames of a scanned segment (wal.scan without verify) and the records in them.

    Returns (i, why): the first frame i whose frame CRC fails (FRAME_BAD_CRC) or whose user record
    fails its own CRC (RECORD_BAD_CRC), or (-1, FRAME_OK). A user frame whose data is not one whole
    XLogRecord gets its frame CRC checked alone; decoding it reports what is wrong with it.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef Py_ssize_t bad = -1
    cdef int why = _FRAME_OK
    cdef const uint8_t* f
    cdef const uint8_t* rec
    cdef uint32_t length, body_len, body, frame
    if types.shape[0] != n or lengths.shape[0] != n:
        raise ValueError("starts, types and lengths have one entry per frame")
    for i in range(n):
        if starts[i] + WAL_HEADER_SIZE + lengths[i] > <uint64_t>buf.shape[0]:
            raise ValueError(f"frame {i} runs past the buffer")
    with nogil:
        for i in range(n):
            f = &buf[0] + starts[i]
            length = lengths[i]
            rec = f + WAL_HEADER_SIZE + _PREFIX
            if (types[i] != _USER_RECORD or length < _PREFIX + SIZE_OF_XLOG_RECORD
                    or _get32(rec) != length - _PREFIX):
                if _get32(f + WAL_OFF_CRC) != _frame_crc(f, length):
                    bad, why = i, _FRAME_BAD_CRC
                    break
                continue
            body_len = length - _PREFIX - SIZE_OF_XLOG_RECORD
            body = crc32c_update(0, rec + SIZE_OF_XLOG_RECORD, body_len)
            # the frame's CRC up to the body (prefix and record header), finished from the body's
            frame = _frame_crc_start(f, _PREFIX + SIZE_OF_XLOG_RECORD)
            if _get32(f + WAL_OFF_CRC) != crc32c_combine(frame, body, body_len):
                bad, why = i, _FRAME_BAD_CRC
                break
            if _get32(rec + XLOG_RECORD_CRC_OFFSET) != crc32c_update(body, rec, XLOG_RECORD_CRC_OFFSET):
                bad, why = i, _RECORD_BAD_CRC
                break
    return bad, why


def scan_checked(buf, uint64_t first_lsn, uint32_t max_length=0xFFFFFFFF) -> tuple:
    """wal.scan of a whole segment's bytes with every frame's CRC-32C, and the record's own in each
    user frame, checked in one pass. Returns wal.scan's (starts, types, lengths, end, status), cut
    at the first frame whose CRC fails (status BAD_CRC, as a verifying scan stops there), and the
    index of the first frame whose record fails its own CRC in an intact frame (-1: none)."""
    starts, types, lengths, end, status = wal.scan(buf, 0, first_lsn, max_length=max_length, verify=False)
    if not len(starts):
        return starts, types, lengths, end, status, -1
    bad, why = checked_frames(buf, starts, types, lengths)
    if why == _RECORD_BAD_CRC:
        return starts, types, lengths, end, status, bad
    if why == _FRAME_BAD_CRC:
        return starts[:bad], types[:bad], lengths[:bad], int(starts[bad]), wal.BAD_CRC, -1
    return starts, types, lengths, end, status, -1
