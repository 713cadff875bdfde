# cython: language_level=3
"""Block references of the WAL records inside one logtide log segment, as numpy arrays.

The Spark scan stage and the `logtide.wal` data source read log segment files directly: `wal.scan`
validates the frames, then `segment_refs` decodes the XLogRecord of each user frame (CRC-checked,
unless the scan checked it with its frame: record_checks.pyx) and emits one row per block
reference, with the record's location in the segment, without making a Python object per record.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.wal cimport WAL_HEADER_SIZE
from logtide._ext.xlog_format cimport BKPBLOCK_HAS_IMAGE
from logtide._ext.xlogreader cimport XLDecoded, xl_decode, XL_OK

cnp.import_array()

# every user record's data starts with u32 BE update type + u64 BE replica id (docs/wal_format.md)
DATA_PREFIX = 12
cdef enum:
    _PREFIX = 12
    _USER_RECORD = 0

# verify_crc: whether segment_refs checks each record's own CRC-32C (NONE: the scan did, with the
# frames' in one pass: record_checks.pyx)
cdef enum:
    _VERIFY_NONE = 0
    _VERIFY_EVERY = 1
VERIFY_NONE = _VERIFY_NONE
VERIFY_EVERY = _VERIFY_EVERY

COLUMNS = ("lsn", "xid", "rmid", "info", "tags", "has_image", "valid", "rec_off", "rec_len")


@cython.boundscheck(False)
@cython.wraparound(False)
def segment_refs(const uint8_t[::1] buf, const uint64_t[::1] starts, const uint32_t[::1] types,
                 const uint32_t[::1] lengths, uint64_t first_lsn, uint64_t max_lsn=0xFFFFFFFFFFFFFFFF,
                 int verify_crc=_VERIFY_EVERY, bint null_rows=False) -> tuple:
    """Decode the user frames i of a scanned segment (LSN first_lsn + i, up to max_lsn).

    Returns (columns, bad_frame, code): columns is a dict of arrays named COLUMNS, one row per
    block reference (with null_rows, a record without block references gives one row whose
    `valid` is 0); rec_off/rec_len locate the XLogRecord in buf. bad_frame is the index of the
    first frame whose record fails to decode (its xl_decode code in `code`), or -1. verify_crc:
    VERIFY_EVERY (or True) or VERIFY_NONE (or False).
    """
    if verify_crc not in (_VERIFY_NONE, _VERIFY_EVERY):
        raise ValueError(f"verify_crc is VERIFY_NONE or VERIFY_EVERY, not {verify_crc!r}")
    cdef Py_ssize_t n = starts.shape[0], i, k = 0, cap, j, nb
    cdef int rc = XL_OK
    cdef Py_ssize_t bad = -1
    cdef XLDecoded d
    cdef uint64_t off, lsn
    cdef uint32_t length
    if types.shape[0] != n or lengths.shape[0] != n:
        raise ValueError("starts, types and lengths have one entry per frame")
    for i in range(n):
        if starts[i] + WAL_HEADER_SIZE + lengths[i] > <uint64_t>buf.shape[0]:
            raise ValueError(f"frame {i} runs past the buffer")
    cap = n * 2 + 8
    cols = {"lsn": np.empty(cap, np.uint64), "xid": np.empty(cap, np.uint32), "rmid": np.empty(cap, np.uint8),
            "info": np.empty(cap, np.uint8), "tags": np.zeros((cap, 5), np.uint32),
            "has_image": np.zeros(cap, np.uint8), "valid": np.empty(cap, np.uint8),
            "rec_off": np.empty(cap, np.int64), "rec_len": np.empty(cap, np.uint32)}
    cdef uint64_t[::1] c_lsn
    cdef uint32_t[::1] c_xid
    cdef uint8_t[::1] c_rmid, c_info, c_img, c_valid
    cdef uint32_t[:, ::1] c_tags
    cdef int64_t[::1] c_off
    cdef uint32_t[::1] c_len
    i = 0
    while True:
        c_lsn = cols["lsn"]; c_xid = cols["xid"]; c_rmid = cols["rmid"]; c_info = cols["info"]
        c_tags = cols["tags"]; c_img = cols["has_image"]; c_valid = cols["valid"]
        c_off = cols["rec_off"]; c_len = cols["rec_len"]
        with nogil:
            while i < n:
                lsn = first_lsn + <uint64_t>i
                if lsn > max_lsn:
                    i = n
                    break
                if types[i] != _USER_RECORD:
                    i += 1
                    continue
                if lengths[i] <= _PREFIX:
                    bad = i
                    rc = -2
                    break
                off = starts[i] + WAL_HEADER_SIZE + _PREFIX
                length = lengths[i] - _PREFIX
                rc = xl_decode(&buf[off], length, &d, verify_crc == _VERIFY_EVERY, False)
                if rc == XL_OK and d.tot_len != length:
                    rc = -9  # XL_ERR_LENGTHS: the frame holds more than the record
                if rc != XL_OK:
                    bad = i
                    break
                nb = d.nblocks
                if k + nb + 1 > cap:
                    break  # grow outside nogil, then decode this frame again
                if nb == 0 and null_rows:
                    c_lsn[k] = lsn; c_xid[k] = d.xid; c_rmid[k] = d.rmid; c_info[k] = d.info
                    c_valid[k] = 0; c_img[k] = 0; c_off[k] = off; c_len[k] = length
                    for j in range(5):
                        c_tags[k, j] = 0
                    k += 1
                for j in range(nb):
                    c_lsn[k] = lsn; c_xid[k] = d.xid; c_rmid[k] = d.rmid; c_info[k] = d.info
                    c_tags[k, 0] = d.blocks[j].spc
                    c_tags[k, 1] = d.blocks[j].db
                    c_tags[k, 2] = d.blocks[j].rel
                    c_tags[k, 3] = d.blocks[j].fork
                    c_tags[k, 4] = d.blocks[j].block
                    c_img[k] = 1 if d.blocks[j].fork_flags & BKPBLOCK_HAS_IMAGE else 0
                    c_valid[k] = 1; c_off[k] = off; c_len[k] = length
                    k += 1
                i += 1
        if bad >= 0 or i >= n:
            break
        cap *= 2
        for name in COLUMNS:
            a = cols[name]
            g = np.zeros((cap, 5), a.dtype) if name == "tags" else np.empty(cap, a.dtype)
            g[:k] = a[:k]
            cols[name] = g
    return {name: cols[name][:k] for name in COLUMNS}, bad, rc
