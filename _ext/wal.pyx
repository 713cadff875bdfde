# cython: language_level=3
"""The log service's record codec: frame encoder, validating segment scan, record decoder.

Frame layout (see wal.pxd and docs/wal_format.md): [u32 length][u32 crc32c][u64 lsn][u32 type][data].
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy
cimport cython
import numpy as np
cimport numpy as cnp

cnp.import_array()

HEADER_SIZE = WAL_HEADER_SIZE
STATUS_NAMES = {
    SCAN_OK: "ok",
    SCAN_SHORT_HEADER: "short header",
    SCAN_SHORT_DATA: "short data",
    SCAN_BAD_LENGTH: "bad length",
    SCAN_BAD_CRC: "crc mismatch",
    SCAN_BAD_LSN: "lsn out of sequence",
    SCAN_SIZE_LIMIT: "size limit",
}
OK = SCAN_OK
SHORT_HEADER = SCAN_SHORT_HEADER
SHORT_DATA = SCAN_SHORT_DATA
BAD_LENGTH = SCAN_BAD_LENGTH
BAD_CRC = SCAN_BAD_CRC
BAD_LSN = SCAN_BAD_LSN
SIZE_LIMIT = SCAN_SIZE_LIMIT


def frame_crc(const uint8_t[::1] frame) -> int:
    """The CRC a complete frame must carry (for tests and tools)."""
    if frame.shape[0] < WAL_HEADER_SIZE:
        raise ValueError("a frame has at least 20 bytes")
    cdef uint32_t length = _get32(&frame[0])
    if WAL_HEADER_SIZE + <Py_ssize_t>length > frame.shape[0]:
        raise ValueError("frame shorter than its length field")
    return _frame_crc(&frame[0], length)


@cython.boundscheck(False)
@cython.wraparound(False)
def encode(uint64_t first_lsn, uint32_t rtype, const uint8_t[::1] prefix, list payloads):
    """Frame payloads as records first_lsn, first_lsn+1, ...; each record's data is prefix + payload.

    Returns (frames: bytes, starts: uint64 array of each frame's offset within frames).
    """
    cdef Py_ssize_t n = len(payloads), i, total = 0, plen = prefix.shape[0], dlen
    cdef cnp.ndarray[cnp.uint64_t, ndim=1] starts = np.empty(n, dtype=np.uint64)
    cdef list views = [None] * n
    cdef const uint8_t[::1] mv
    cdef object p
    for i in range(n):
        p = payloads[i]
        if PyBytes_CheckExact(p):
            dlen = PyBytes_GET_SIZE(p)
        else:
            try:
                mv = p
            except (TypeError, ValueError) as exc:
                raise TypeError(f"payload {i} must be bytes-like, not {type(p).__name__}") from exc
            views[i] = mv
            dlen = mv.shape[0]
        if plen + dlen > 0xFFFFFFFF:
            raise ValueError(f"payload {i} does not fit a u32 length")
        starts[i] = total
        total += WAL_HEADER_SIZE + plen + dlen
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* dst = <uint8_t*>PyBytes_AS_STRING(out)
    cdef uint8_t* f
    cdef const uint8_t* src
    cdef uint32_t length
    for i in range(n):
        p = payloads[i]
        if views[i] is None:
            src = <const uint8_t*>PyBytes_AS_STRING(p)
            dlen = PyBytes_GET_SIZE(p)
        else:
            mv = views[i]
            dlen = mv.shape[0]
            src = &mv[0] if dlen else NULL
        f = dst + starts[i]
        length = <uint32_t>(plen + dlen)
        _put32(f + WAL_OFF_LENGTH, length)
        _put64(f + WAL_OFF_LSN, first_lsn + <uint64_t>i)
        _put32(f + WAL_OFF_TYPE, rtype)
        if plen:
            memcpy(f + WAL_HEADER_SIZE, &prefix[0], plen)
        if dlen:
            memcpy(f + WAL_HEADER_SIZE + plen, src, dlen)
        _put32(f + WAL_OFF_CRC, _frame_crc(f, length))
    return out, starts


@cython.boundscheck(False)
@cython.wraparound(False)
def scan(const uint8_t[::1] buf, Py_ssize_t start, uint64_t first_lsn, Py_ssize_t max_records=-1,
         uint64_t max_bytes=0xFFFFFFFFFFFFFFFF, uint32_t max_length=0xFFFFFFFF, bint verify=True):
    """Validate consecutive frames from `start`; the first must carry `first_lsn`, the next +1, and so on.

    Stops at the end of `buf`, after `max_records`, before a record that would push the data total
    past `max_bytes` (at least one record is always taken), or at the first bad frame.
    A frame position where only zero bytes remain to the end of `buf` is the clean end (OK): the
    zero-filled, pre-allocated rest of a segment. Zeros followed by anything else are damage.
    Returns (starts u64[n], types u32[n], lengths u32[n], end, status): `end` is the offset just past
    the last good frame, `status` one of the SCAN_* codes (OK, SIZE_LIMIT or why it stopped).
    """
    cdef Py_ssize_t size = buf.shape[0]
    if start < 0 or start > size:
        raise ValueError("start outside the buffer")
    cdef Py_ssize_t cap = (size - start) // WAL_HEADER_SIZE  # frames are at least 20 bytes
    cdef Py_ssize_t limit = max_records if max_records >= 0 else cap + 1
    if limit < cap:
        cap = limit
    cdef cnp.ndarray[cnp.uint64_t, ndim=1] starts = np.empty(cap, dtype=np.uint64)
    cdef cnp.ndarray[cnp.uint32_t, ndim=1] types = np.empty(cap, dtype=np.uint32)
    cdef cnp.ndarray[cnp.uint32_t, ndim=1] lengths = np.empty(cap, dtype=np.uint32)
    cdef uint64_t* s_p = <uint64_t*>starts.data
    cdef uint32_t* t_p = <uint32_t*>types.data
    cdef uint32_t* l_p = <uint32_t*>lengths.data
    cdef const uint8_t* base = &buf[0] if size else NULL
    cdef Py_ssize_t pos = start, n = 0
    cdef uint64_t taken = 0
    cdef uint32_t length
    cdef int status = SCAN_OK
    with nogil:
        while n < limit:
            # a zero header (LSN 0 is never valid) with only zeros after it: the pre-allocated,
            # never written rest of the segment, i.e. the clean end of the log
            if pos < size and _all_zero(base + pos, min(<Py_ssize_t>WAL_HEADER_SIZE, size - pos)) \
                    and _all_zero(base + pos, size - pos):
                status = SCAN_OK
                break
            if size - pos < WAL_HEADER_SIZE:
                status = SCAN_OK if pos == size else SCAN_SHORT_HEADER
                break
            length = _get32(base + pos)
            if length > max_length:
                status = SCAN_BAD_LENGTH
                break
            if <Py_ssize_t>length > size - pos - WAL_HEADER_SIZE:
                status = SCAN_SHORT_DATA
                break
            if verify and _get32(base + pos + WAL_OFF_CRC) != _frame_crc(base + pos, length):
                status = SCAN_BAD_CRC
                break
            if _get64(base + pos + WAL_OFF_LSN) != first_lsn + <uint64_t>n:
                status = SCAN_BAD_LSN
                break
            if n > 0 and taken + length > max_bytes:
                status = SCAN_SIZE_LIMIT
                break
            taken += length
            s_p[n] = pos
            t_p[n] = _get32(base + pos + WAL_OFF_TYPE)
            l_p[n] = length
            n += 1
            pos += WAL_HEADER_SIZE + length
    return starts[:n].copy(), types[:n].copy(), lengths[:n].copy(), pos, status


@cython.boundscheck(False)
@cython.wraparound(False)
def find_frame(const uint8_t[::1] buf, Py_ssize_t start, uint64_t min_lsn, uint32_t max_length=0xFFFFFFFF) -> int:
    """Offset of the first complete, CRC-valid frame at or after `start` whose LSN is >= min_lsn, or -1.

    Recovery uses it to tell a torn tail (nothing valid follows) from corruption in the middle.
    """
    cdef Py_ssize_t size = buf.shape[0], pos
    cdef const uint8_t* base = &buf[0] if size else NULL
    cdef uint32_t length
    cdef uint64_t lsn
    cdef Py_ssize_t found = -1
    with nogil:
        pos = start if start > 0 else 0
        while pos + WAL_HEADER_SIZE <= size:
            length = _get32(base + pos)
            lsn = _get64(base + pos + WAL_OFF_LSN)
            if (length <= max_length and <Py_ssize_t>length <= size - pos - WAL_HEADER_SIZE
                    and lsn >= min_lsn and lsn - min_lsn < (<uint64_t>1 << 40)
                    and _get32(base + pos + WAL_OFF_CRC) == _frame_crc(base + pos, length)):
                found = pos
                break
            pos += 1
    return found


@cython.boundscheck(False)
@cython.wraparound(False)
def decode(bytes buf, const cnp.uint64_t[::1] starts, const cnp.uint32_t[::1] types,
           const cnp.uint32_t[::1] lengths, uint64_t first_lsn, object factory):
    """Build factory(lsn, type, data) for each scanned frame of `buf` (records first_lsn, +1, ...)."""
    cdef Py_ssize_t n = starts.shape[0], i
    if types.shape[0] != n or lengths.shape[0] != n:
        raise ValueError("starts, types and lengths differ in length")
    cdef const char* base = PyBytes_AS_STRING(buf)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(buf)
    cdef list out = [None] * n
    for i in range(n):
        if <Py_ssize_t>(starts[i] + WAL_HEADER_SIZE + lengths[i]) > size:
            raise ValueError("frame beyond the buffer")
        out[i] = factory(first_lsn + <uint64_t>i, types[i],
                         PyBytes_FromStringAndSize(base + starts[i] + WAL_HEADER_SIZE, lengths[i]))
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def fit(const cnp.uint64_t[::1] starts, Py_ssize_t i, Py_ssize_t count, uint64_t max_bytes) -> int:
    """How many frames from index i (at most `count`) fit `max_bytes` of data; at least one if any.

    starts[j] is frame j's offset and starts[j+1] its end, so starts needs i + count + 1 entries.
    Data of frames i..j-1 is (starts[j] - starts[i]) - 20*(j - i), non-decreasing in j: binary search.
    """
    if i < 0 or count < 0 or i + count >= starts.shape[0]:
        raise ValueError("index range outside starts")
    if count == 0:
        return 0
    cdef Py_ssize_t lo = 1, hi = count, mid
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if (starts[i + mid] - starts[i]) - <uint64_t>WAL_HEADER_SIZE * mid <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


@cython.boundscheck(False)
@cython.wraparound(False)
def encode_rows(uint64_t first_lsn, uint32_t rtype, const uint8_t[::1] prefix, const uint8_t[:, ::1] rows):
    """`encode` for fixed-size payloads: row i of a 2-D uint8 array is record first_lsn + i."""
    cdef Py_ssize_t n = rows.shape[0], width = rows.shape[1], plen = prefix.shape[0], i
    if plen + width > 0xFFFFFFFF:
        raise ValueError("rows do not fit a u32 length")
    cdef Py_ssize_t frame = WAL_HEADER_SIZE + plen + width
    cdef cnp.ndarray[cnp.uint64_t, ndim=1] starts = np.arange(n, dtype=np.uint64) * <uint64_t>frame
    out = PyBytes_FromStringAndSize(NULL, n * frame)
    cdef uint8_t* dst = <uint8_t*>PyBytes_AS_STRING(out)
    cdef uint8_t* f
    cdef uint32_t length = <uint32_t>(plen + width)
    with nogil:
        for i in range(n):
            f = dst + i * frame
            _put32(f + WAL_OFF_LENGTH, length)
            _put64(f + WAL_OFF_LSN, first_lsn + <uint64_t>i)
            _put32(f + WAL_OFF_TYPE, rtype)
            if plen:
                memcpy(f + WAL_HEADER_SIZE, &prefix[0], plen)
            if width:
                memcpy(f + WAL_HEADER_SIZE + plen, &rows[i, 0], width)
            _put32(f + WAL_OFF_CRC, _frame_crc(f, length))
    return out, starts
