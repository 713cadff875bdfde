# cython: language_level=3
"""The XLogRecord decoder: PostgreSQL 15 WAL records, from logtide's WAL or from real WAL segments.

Python API
----------
``decode_record(buf, offset=0, *, verify_crc=True, meta=False) -> DecodedRecord``
    Decode one record starting at ``buf[offset]``. Validates ``xl_tot_len`` (>= 24 and within the
    buffer), the resource manager id, the block headers, and the CRC-32C exactly as PostgreSQL does
    (CRC over the bytes after the 24-byte header, then the header up to ``xl_crc``). Raises
    ``logtide.errors.CorruptRecordError`` on any failure. ``meta=True`` decodes the WAL-meta form
    (see ``wal_meta``); its CRC cannot be checked because it covers the removed block data.

``DecodedRecord`` fields: ``tot_len, xid, prev, info, rmid, crc, toplevel_xid, origin, size,
blocks`` (tuple of ``BlockRef``), ``main_offset, main_length`` (the main data span in the decoded
buffer), ``headers_end, blocks_length``, and ``main_data`` (bytes).

``BlockRef`` (named tuple): ``block_id, fork_flags, tag`` (``logtide.PageTag``), ``spc, db, rel,
fork, block, has_image, has_data, will_init, apply_image, bimg_info, bimg_len, hole_offset,
hole_length, compressed, image_offset, data_length, data_offset``. Offsets are positions in the
FULL record (also when decoded from WAL meta).

``wal_meta(buf, offset=0) -> bytes``
    The WAL-meta form of a full record: the 24-byte header unchanged (so ``xl_tot_len`` and
    ``xl_crc`` still describe the full record), the block/data headers, then the main data; the
    block data (images and per-block data) is dropped.

``record_crc(buf, offset=0) -> int`` and ``set_record_crc(buf, offset=0) -> int``
    Compute the CRC-32C of the full record at ``offset`` (using its ``xl_tot_len``); the second
    form writes it into ``xl_crc`` of a writable buffer. Writers build a record with ``xl_crc``
    zero, then call ``set_record_crc``.

``decode_many(buf, *, lsns=None, base_lsn=0, align=1, verify_crc=True, meta=False) -> RecordBatch``
    Decode records stored back to back in ``buf`` (each next one at ``align``-rounded end of the
    previous). Record ``i`` gets LSN ``lsns[i]`` when ``lsns`` is given, otherwise ``base_lsn + its
    offset``. Raises ``CorruptRecordError`` (with the record index and offset) on the first bad one.

``RecordBatch``: numpy arrays, one row per block reference: ``lsn`` (uint64), ``tags`` ((n, 5)
uint32: spc, db, rel, fork, block), ``rmid`` (uint8), ``info`` (uint8), ``xid`` (uint32),
``block_id`` (uint8), ``fork_flags`` (uint8); and one row per record: ``rec_lsn, rec_tot_len,
rec_xid, rec_prev, rec_rmid, rec_info, rec_first`` (index of its first block row),
``rec_nblocks``. ``end_offset`` is the number of bytes consumed (or the LSN after the last record
for ``WalPageDecoder``). ``records()`` yields ``(lsn, [PageTag...], rmid, info, xid)``.

``WalPageDecoder(seg_size=16 MiB, strict=False)`` with ``feed(segment_bytes, seg_start_lsn) ->
RecordBatch``: decodes consecutive PostgreSQL WAL segment files: short and long page headers,
records split across pages and segments, XLOG_SWITCH. The end of WAL (a zero record length, a
recycled page with an older address, or, unless ``strict``, an invalid record) stops decoding;
``done``, ``end_lsn`` and ``end_reason`` say where and why. With ``strict=True`` an invalid record
or page that is not the zeroed or recycled end raises ``CorruptRecordError``/``CorruptWalPageError``.

C API (``xlogreader.pxd``): ``xl_decode(rec, avail, &out, verify_crc, meta)`` and
``xl_record_crc(rec, tot_len)``, both ``nogil``.
"""
from collections import namedtuple

import numpy as np
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset

from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.murmur3 cimport LT_LE32, LT_LE64
from logtide._ext.xlog_format cimport *
from logtide.errors import CorruptRecordError, CorruptWalPageError
from logtide.pagetag import PageTag

BlockRef = namedtuple("BlockRef", [
    "block_id", "fork_flags", "tag", "spc", "db", "rel", "fork", "block", "has_image", "has_data",
    "will_init", "apply_image", "bimg_info", "bimg_len", "hole_offset", "hole_length", "compressed",
    "image_offset", "data_length", "data_offset"])

_ERRORS = {
    XL_ERR_SHORT_HEADER: "record header shorter than 24 bytes",
    XL_ERR_TOT_LEN: "invalid xl_tot_len",
    XL_ERR_CRC: "incorrect resource manager data checksum",
    XL_ERR_RMID: "invalid resource manager ID",
    XL_ERR_BLOCK_ID: "invalid or out-of-order block_id",
    XL_ERR_BLOCK_HEADER: "block header runs past the record header area",
    XL_ERR_IMAGE: "inconsistent block image header (hole, length or compression)",
    XL_ERR_SAME_REL: "BKPBLOCK_SAME_REL set but no previous rel",
    XL_ERR_LENGTHS: "record header lengths do not add up to xl_tot_len",
    XL_ERR_DATA_FLAGS: "BKPBLOCK_HAS_DATA inconsistent with data length",
}


def xl_error_text(int code):
    """The message of an xl_decode result code."""
    return _ERRORS.get(code, f"unknown error {code}")


cdef inline uint32_t _ld32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return LT_LE32(v)


cdef inline uint64_t _ld64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return LT_LE64(v)


cdef inline uint16_t _ld16(const uint8_t* p) noexcept nogil:
    return <uint16_t>(p[0] | (p[1] << 8))


cdef inline uint64_t _maxalign(uint64_t x) noexcept nogil:
    return (x + 7) & ~(<uint64_t>7)


cdef uint32_t xl_record_crc(const uint8_t* rec, uint32_t tot_len) noexcept nogil:
    cdef uint32_t c = crc32c_update(0, rec + SIZE_OF_XLOG_RECORD, tot_len - SIZE_OF_XLOG_RECORD)
    return crc32c_update(c, rec, XLOG_RECORD_CRC_OFFSET)


cdef int xl_decode(const uint8_t* rec, size_t avail, XLDecoded* out, bint verify_crc, bint meta) noexcept nogil:
    cdef uint32_t tot_len, remaining, datatotal = 0, pos, off, n
    cdef int max_block_id = -1, i
    cdef uint8_t block_id, fork_flags
    cdef XLBlockRef* blk
    cdef XLBlockRef* prev_rel = NULL
    cdef bint compressed
    if avail < SIZE_OF_XLOG_RECORD:
        return XL_ERR_SHORT_HEADER
    tot_len = _ld32(rec)
    if tot_len < SIZE_OF_XLOG_RECORD or (not meta and tot_len > avail):
        return XL_ERR_TOT_LEN
    out.tot_len = tot_len
    out.xid = _ld32(rec + 4)
    out.prev = _ld64(rec + 8)
    out.info = rec[16]
    out.rmid = rec[17]
    out.crc = _ld32(rec + XLOG_RECORD_CRC_OFFSET)
    out.toplevel_xid = 0
    out.origin = 0
    out.has_origin = 0
    out.nblocks = 0
    out.main_len = 0
    if out.rmid > RM_MAX_BUILTIN_ID and out.rmid < RM_MIN_CUSTOM_ID:
        return XL_ERR_RMID
    if verify_crc and not meta and xl_record_crc(rec, tot_len) != out.crc:
        return XL_ERR_CRC
    pos = SIZE_OF_XLOG_RECORD
    remaining = tot_len - SIZE_OF_XLOG_RECORD
    # The header area: block headers, then at most one main-data header, which ends it.
    while remaining > datatotal:
        if remaining < 1 or pos + 1 > avail:
            return XL_ERR_BLOCK_HEADER
        block_id = rec[pos]
        pos += 1
        remaining -= 1
        if block_id == XLR_BLOCK_ID_DATA_SHORT:
            if remaining < 1 or pos + 1 > avail:
                return XL_ERR_BLOCK_HEADER
            out.main_len = rec[pos]
            pos += 1
            remaining -= 1
            datatotal += out.main_len
            break
        elif block_id == XLR_BLOCK_ID_DATA_LONG:
            if remaining < 4 or pos + 4 > avail:
                return XL_ERR_BLOCK_HEADER
            out.main_len = _ld32(rec + pos)
            pos += 4
            remaining -= 4
            if out.main_len > tot_len:
                return XL_ERR_LENGTHS
            datatotal += out.main_len
            break
        elif block_id == XLR_BLOCK_ID_ORIGIN:
            if remaining < 2 or pos + 2 > avail:
                return XL_ERR_BLOCK_HEADER
            out.origin = _ld16(rec + pos)
            out.has_origin = 1
            pos += 2
            remaining -= 2
        elif block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
            if remaining < 4 or pos + 4 > avail:
                return XL_ERR_BLOCK_HEADER
            out.toplevel_xid = _ld32(rec + pos)
            pos += 4
            remaining -= 4
        elif block_id <= XLR_MAX_BLOCK_ID:
            if <int>block_id <= max_block_id:
                return XL_ERR_BLOCK_ID
            max_block_id = block_id
            if remaining < 3 or pos + 3 > avail:
                return XL_ERR_BLOCK_HEADER
            blk = &out.blocks[out.nblocks]
            out.nblocks += 1
            fork_flags = rec[pos]
            blk.block_id = block_id
            blk.fork_flags = fork_flags
            blk.fork = fork_flags & BKPBLOCK_FORK_MASK
            blk.has_image = (fork_flags & BKPBLOCK_HAS_IMAGE) != 0
            blk.has_data = (fork_flags & BKPBLOCK_HAS_DATA) != 0
            blk.data_len = _ld16(rec + pos + 1)
            pos += 3
            remaining -= 3
            if blk.has_data and blk.data_len == 0:
                return XL_ERR_DATA_FLAGS
            if not blk.has_data and blk.data_len != 0:
                return XL_ERR_DATA_FLAGS
            datatotal += blk.data_len
            blk.apply_image = 0
            blk.bimg_info = 0
            blk.bimg_len = 0
            blk.hole_offset = 0
            blk.hole_length = 0
            if blk.has_image:
                if remaining < SIZE_OF_IMAGE_HEADER or pos + SIZE_OF_IMAGE_HEADER > avail:
                    return XL_ERR_BLOCK_HEADER
                blk.bimg_len = _ld16(rec + pos)
                blk.hole_offset = _ld16(rec + pos + 2)
                blk.bimg_info = rec[pos + 4]
                pos += SIZE_OF_IMAGE_HEADER
                remaining -= SIZE_OF_IMAGE_HEADER
                blk.apply_image = (blk.bimg_info & BKPIMAGE_APPLY) != 0
                compressed = (blk.bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 |
                                               BKPIMAGE_COMPRESS_ZSTD)) != 0
                if compressed:
                    if blk.bimg_info & BKPIMAGE_HAS_HOLE:
                        if remaining < SIZE_OF_COMPRESS_HEADER or pos + SIZE_OF_COMPRESS_HEADER > avail:
                            return XL_ERR_BLOCK_HEADER
                        blk.hole_length = _ld16(rec + pos)
                        pos += SIZE_OF_COMPRESS_HEADER
                        remaining -= SIZE_OF_COMPRESS_HEADER
                else:
                    blk.hole_length = <uint16_t>(BLCKSZ - blk.bimg_len)
                datatotal += blk.bimg_len
                # PostgreSQL's four consistency checks of an image header
                if (blk.bimg_info & BKPIMAGE_HAS_HOLE) and (
                        blk.hole_offset == 0 or blk.hole_length == 0 or blk.bimg_len == BLCKSZ):
                    return XL_ERR_IMAGE
                if not (blk.bimg_info & BKPIMAGE_HAS_HOLE) and (blk.hole_offset != 0 or blk.hole_length != 0):
                    return XL_ERR_IMAGE
                if compressed and blk.bimg_len == BLCKSZ:
                    return XL_ERR_IMAGE
                if not (blk.bimg_info & BKPIMAGE_HAS_HOLE) and not compressed and blk.bimg_len != BLCKSZ:
                    return XL_ERR_IMAGE
            if not (fork_flags & BKPBLOCK_SAME_REL):
                if remaining < SIZE_OF_RELFILENODE or pos + SIZE_OF_RELFILENODE > avail:
                    return XL_ERR_BLOCK_HEADER
                blk.spc = _ld32(rec + pos)
                blk.db = _ld32(rec + pos + 4)
                blk.rel = _ld32(rec + pos + 8)
                pos += SIZE_OF_RELFILENODE
                remaining -= SIZE_OF_RELFILENODE
            else:
                if prev_rel == NULL:
                    return XL_ERR_SAME_REL
                blk.spc = prev_rel.spc
                blk.db = prev_rel.db
                blk.rel = prev_rel.rel
            prev_rel = blk
            if remaining < 4 or pos + 4 > avail:
                return XL_ERR_BLOCK_HEADER
            blk.block = _ld32(rec + pos)
            pos += 4
            remaining -= 4
        else:
            return XL_ERR_BLOCK_ID
    if remaining != datatotal:
        return XL_ERR_LENGTHS
    out.headers_end = pos
    off = pos
    for i in range(out.nblocks):
        blk = &out.blocks[i]
        blk.image_off = off if blk.has_image else 0
        off += blk.bimg_len
        blk.data_off = off if blk.has_data else 0
        off += blk.data_len
    out.blocks_len = off - pos
    if meta:
        out.main_off = pos
        out.size = pos + out.main_len
        if out.size > avail:
            return XL_ERR_TOT_LEN
    else:
        out.main_off = off
        out.size = tot_len
    return XL_OK


cdef class DecodedRecord:
    """One decoded XLogRecord: header fields, block references and the main-data span."""
    cdef readonly uint32_t tot_len, xid, crc, toplevel_xid, main_offset, main_length, headers_end
    cdef readonly uint32_t blocks_length, size
    cdef readonly uint64_t prev
    cdef readonly uint8_t info, rmid
    cdef readonly object origin
    cdef readonly tuple blocks
    cdef object _buf
    cdef Py_ssize_t _base

    @property
    def main_data(self):
        """The main data bytes."""
        b = self._base + self.main_offset
        return bytes(self._buf[b:b + self.main_length])

    def __repr__(self):
        return (f"DecodedRecord(tot_len={self.tot_len}, xid={self.xid}, prev={self.prev:#x}, "
                f"info={self.info:#04x}, rmid={self.rmid}, blocks={len(self.blocks)}, main={self.main_length})")


cdef object _block_tuple(XLBlockRef* b):
    return BlockRef(
        b.block_id, b.fork_flags, tuple.__new__(PageTag, (b.spc, b.db, b.rel, b.fork, b.block)),
        b.spc, b.db, b.rel, b.fork, b.block, bool(b.has_image), bool(b.has_data),
        bool(b.fork_flags & BKPBLOCK_WILL_INIT), bool(b.apply_image), b.bimg_info, b.bimg_len,
        b.hole_offset, b.hole_length,
        bool(b.bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD)),
        b.image_off, b.data_len, b.data_off)


cdef const uint8_t[::1] _bytes_view(object buf):
    if isinstance(buf, str):
        raise TypeError("WAL records are bytes-like, not str")
    try:
        return memoryview(buf).cast("B")
    except TypeError:
        raise TypeError(f"WAL records are bytes-like, not {type(buf).__name__}") from None


def decode_record(buf, Py_ssize_t offset=0, *, bint verify_crc=True, bint meta=False):
    """Decode the record at buf[offset]; raises CorruptRecordError when it is invalid."""
    cdef const uint8_t[::1] v = _bytes_view(buf)
    cdef XLDecoded d
    cdef int rc, i
    if offset < 0 or offset > v.shape[0]:
        raise CorruptRecordError(f"record offset {offset} outside a buffer of {v.shape[0]} bytes")
    if offset == v.shape[0]:
        raise CorruptRecordError(f"WAL record at offset {offset}: {xl_error_text(XL_ERR_SHORT_HEADER)}")
    rc = xl_decode(&v[offset], v.shape[0] - offset, &d, verify_crc, meta)
    if rc != XL_OK:
        raise CorruptRecordError(f"WAL record at offset {offset}: {xl_error_text(rc)}")
    cdef DecodedRecord r = DecodedRecord.__new__(DecodedRecord)
    r.tot_len, r.xid, r.prev, r.info, r.rmid, r.crc = d.tot_len, d.xid, d.prev, d.info, d.rmid, d.crc
    r.toplevel_xid = d.toplevel_xid
    r.origin = d.origin if d.has_origin else None
    r.main_offset, r.main_length, r.headers_end = d.main_off, d.main_len, d.headers_end
    r.blocks_length, r.size = d.blocks_len, d.size
    r.blocks = tuple([_block_tuple(&d.blocks[i]) for i in range(d.nblocks)])
    r._buf = v
    r._base = offset
    return r


def record_crc(buf, Py_ssize_t offset=0):
    """PostgreSQL's CRC-32C of the full record at buf[offset] (header field xl_crc excluded)."""
    cdef const uint8_t[::1] v = _bytes_view(buf)
    if offset < 0 or v.shape[0] - offset < SIZE_OF_XLOG_RECORD:
        raise CorruptRecordError(f"no 24-byte record header at offset {offset}")
    cdef uint32_t tot_len = _ld32(&v[offset])
    if tot_len < SIZE_OF_XLOG_RECORD or tot_len > v.shape[0] - offset:
        raise CorruptRecordError(f"xl_tot_len {tot_len} outside the buffer at offset {offset}")
    return xl_record_crc(&v[offset], tot_len)


def set_record_crc(buf, Py_ssize_t offset=0):
    """Write PostgreSQL's CRC-32C into xl_crc of the record at buf[offset]; returns it."""
    cdef uint8_t[::1] w = memoryview(buf).cast("B")
    crc = record_crc(buf, offset)
    w[offset + 20] = crc & 0xFF
    w[offset + 21] = (crc >> 8) & 0xFF
    w[offset + 22] = (crc >> 16) & 0xFF
    w[offset + 23] = crc >> 24
    return crc


def wal_meta(buf, Py_ssize_t offset=0, *, bint verify_crc=True):
    """The WAL-meta form of the full record at buf[offset]: header, block headers, main data."""
    cdef const uint8_t[::1] v = _bytes_view(buf)
    cdef XLDecoded d
    if offset < 0 or offset >= v.shape[0]:
        raise CorruptRecordError(f"record offset {offset} outside a buffer of {v.shape[0]} bytes")
    cdef int rc = xl_decode(&v[offset], v.shape[0] - offset, &d, verify_crc, False)
    if rc != XL_OK:
        raise CorruptRecordError(f"WAL record at offset {offset}: {xl_error_text(rc)}")
    head = bytes(v[offset:offset + d.headers_end])
    return head + bytes(v[offset + d.main_off:offset + d.main_off + d.main_len])


# ---------------------------------------------------------------------------------------------
# batch output: growable C buffers filled without the GIL, copied into numpy arrays at the end

cdef struct Rows:
    Py_ssize_t n, cap, nrec, rcap
    uint64_t* lsn
    uint32_t* tags
    uint8_t* rmid
    uint8_t* info
    uint32_t* xid
    uint8_t* block_id
    uint8_t* fork_flags
    uint64_t* rec_lsn
    uint32_t* rec_tot_len
    uint32_t* rec_xid
    uint64_t* rec_prev
    uint8_t* rec_rmid
    uint8_t* rec_info
    int64_t* rec_first
    uint8_t* rec_nblocks


cdef void _rows_free(Rows* r) noexcept nogil:
    free(r.lsn); free(r.tags); free(r.rmid); free(r.info); free(r.xid); free(r.block_id)
    free(r.fork_flags); free(r.rec_lsn); free(r.rec_tot_len); free(r.rec_xid); free(r.rec_prev)
    free(r.rec_rmid); free(r.rec_info); free(r.rec_first); free(r.rec_nblocks)
    memset(r, 0, sizeof(Rows))


cdef bint _grow(void** p, size_t size) noexcept nogil:
    cdef void* q = realloc(p[0], size if size else 1)
    if q == NULL:
        return False
    p[0] = q
    return True


cdef int _rows_add(Rows* r, uint64_t lsn, XLDecoded* d) noexcept nogil:
    """Append one record and its block rows; -1 when out of memory."""
    cdef Py_ssize_t need = r.n + d.nblocks, cap, i
    cdef XLBlockRef* b
    cdef bint ok = True
    if need > r.cap:
        cap = max(need, 2 * r.cap, 1024)
        ok = (_grow(<void**>&r.lsn, cap * 8) and _grow(<void**>&r.tags, cap * 20) and
              _grow(<void**>&r.rmid, cap) and _grow(<void**>&r.info, cap) and _grow(<void**>&r.xid, cap * 4)
              and _grow(<void**>&r.block_id, cap) and _grow(<void**>&r.fork_flags, cap))
        if not ok:
            return -1
        r.cap = cap
    if r.nrec + 1 > r.rcap:
        cap = max(2 * r.rcap, 1024)
        ok = (_grow(<void**>&r.rec_lsn, cap * 8) and _grow(<void**>&r.rec_tot_len, cap * 4) and
              _grow(<void**>&r.rec_xid, cap * 4) and _grow(<void**>&r.rec_prev, cap * 8) and
              _grow(<void**>&r.rec_rmid, cap) and _grow(<void**>&r.rec_info, cap) and
              _grow(<void**>&r.rec_first, cap * 8) and _grow(<void**>&r.rec_nblocks, cap))
        if not ok:
            return -1
        r.rcap = cap
    i = r.nrec
    r.rec_lsn[i] = lsn
    r.rec_tot_len[i] = d.tot_len
    r.rec_xid[i] = d.xid
    r.rec_prev[i] = d.prev
    r.rec_rmid[i] = d.rmid
    r.rec_info[i] = d.info
    r.rec_first[i] = r.n
    r.rec_nblocks[i] = <uint8_t>d.nblocks
    r.nrec += 1
    for i in range(d.nblocks):
        b = &d.blocks[i]
        r.lsn[r.n] = lsn
        r.tags[5 * r.n] = b.spc
        r.tags[5 * r.n + 1] = b.db
        r.tags[5 * r.n + 2] = b.rel
        r.tags[5 * r.n + 3] = b.fork
        r.tags[5 * r.n + 4] = b.block
        r.rmid[r.n] = d.rmid
        r.info[r.n] = d.info
        r.xid[r.n] = d.xid
        r.block_id[r.n] = b.block_id
        r.fork_flags[r.n] = b.fork_flags
        r.n += 1
    return 0


cdef object _np_copy(void* p, Py_ssize_t n, dtype, shape=None):
    out = np.empty(shape if shape is not None else n, dtype=dtype)
    cdef Py_ssize_t nbytes = out.nbytes
    cdef uint8_t[::1] o
    if nbytes:
        o = out.reshape(-1).view(np.uint8)
        memcpy(&o[0], p, nbytes)
    return out


class RecordBatch:
    """Decoded WAL records as numpy arrays: one row per block reference, one rec_* row per record."""

    __slots__ = ("lsn", "tags", "rmid", "info", "xid", "block_id", "fork_flags", "rec_lsn", "rec_tot_len",
                 "rec_xid", "rec_prev", "rec_rmid", "rec_info", "rec_first", "rec_nblocks", "end_offset")

    def __len__(self):
        return len(self.rec_lsn)

    @property
    def n_rows(self):
        return len(self.lsn)

    def records(self):
        """Yield (lsn, [PageTag...], rmid, info, xid) per record."""
        tags = self.tags.tolist()
        for lsn, first, nb, rmid, info, xid in zip(self.rec_lsn.tolist(), self.rec_first.tolist(),
                                                   self.rec_nblocks.tolist(), self.rec_rmid.tolist(),
                                                   self.rec_info.tolist(), self.rec_xid.tolist()):
            yield lsn, [tuple.__new__(PageTag, t) for t in tags[first:first + nb]], rmid, info, xid

    @staticmethod
    def concat(batches):
        """One batch from several (rec_first re-based)."""
        out = RecordBatch.__new__(RecordBatch)
        base = 0
        firsts = []
        for b in batches:
            firsts.append(b.rec_first + base)
            base += len(b.lsn)
        for name in RecordBatch.__slots__[:-1]:
            if name == "rec_first":
                out.rec_first = np.concatenate(firsts) if firsts else np.empty(0, np.int64)
            elif name == "tags":
                out.tags = (np.concatenate([b.tags for b in batches]) if batches
                            else np.empty((0, 5), np.uint32))
            else:
                parts = [getattr(b, name) for b in batches]
                setattr(out, name, np.concatenate(parts) if parts else np.empty(0, _DTYPES[name]))
        out.end_offset = batches[-1].end_offset if batches else 0
        return out


_DTYPES = {"lsn": np.uint64, "rmid": np.uint8, "info": np.uint8, "xid": np.uint32, "block_id": np.uint8,
           "fork_flags": np.uint8, "rec_lsn": np.uint64, "rec_tot_len": np.uint32, "rec_xid": np.uint32,
           "rec_prev": np.uint64, "rec_rmid": np.uint8, "rec_info": np.uint8, "rec_first": np.int64,
           "rec_nblocks": np.uint8}


cdef object _rows_batch(Rows* r, uint64_t end_offset):
    b = RecordBatch.__new__(RecordBatch)
    b.lsn = _np_copy(r.lsn, r.n, np.uint64)
    b.tags = _np_copy(r.tags, r.n, np.uint32, (r.n, 5))
    b.rmid = _np_copy(r.rmid, r.n, np.uint8)
    b.info = _np_copy(r.info, r.n, np.uint8)
    b.xid = _np_copy(r.xid, r.n, np.uint32)
    b.block_id = _np_copy(r.block_id, r.n, np.uint8)
    b.fork_flags = _np_copy(r.fork_flags, r.n, np.uint8)
    b.rec_lsn = _np_copy(r.rec_lsn, r.nrec, np.uint64)
    b.rec_tot_len = _np_copy(r.rec_tot_len, r.nrec, np.uint32)
    b.rec_xid = _np_copy(r.rec_xid, r.nrec, np.uint32)
    b.rec_prev = _np_copy(r.rec_prev, r.nrec, np.uint64)
    b.rec_rmid = _np_copy(r.rec_rmid, r.nrec, np.uint8)
    b.rec_info = _np_copy(r.rec_info, r.nrec, np.uint8)
    b.rec_first = _np_copy(r.rec_first, r.nrec, np.int64)
    b.rec_nblocks = _np_copy(r.rec_nblocks, r.nrec, np.uint8)
    b.end_offset = end_offset
    return b


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_many(buf, *, lsns=None, uint64_t base_lsn=0, Py_ssize_t align=1, bint verify_crc=True,
                bint meta=False):
    """Decode back-to-back records of buf into a RecordBatch (see the module docstring)."""
    cdef const uint8_t[::1] v = _bytes_view(buf)
    cdef const uint64_t[::1] lv
    cdef bint have_lsns = lsns is not None
    cdef Py_ssize_t nl = 0, pos = 0, size = v.shape[0], idx = 0
    cdef int rc = XL_OK, oom = 0
    cdef XLDecoded d
    cdef Rows r
    cdef uint64_t lsn
    if align < 1 or (align & (align - 1)):
        raise ValueError(f"align must be a power of two, got {align}")
    if have_lsns:
        lv = np.ascontiguousarray(lsns, dtype=np.uint64)
        nl = lv.shape[0]
    memset(&r, 0, sizeof(Rows))
    try:
        with nogil:
            while pos < size:
                if have_lsns and idx >= nl:
                    rc = 1  # more records than LSNs
                    break
                rc = xl_decode(&v[pos], size - pos, &d, verify_crc, meta)
                if rc != XL_OK:
                    break
                lsn = lv[idx] if have_lsns else base_lsn + pos
                if _rows_add(&r, lsn, &d) < 0:
                    oom = 1
                    break
                pos += d.size
                pos = (pos + align - 1) & ~(align - 1)
                idx += 1
        if oom:
            raise MemoryError("decode_many: out of memory")
        if rc == 1:
            raise CorruptRecordError(f"buffer holds more than the {nl} records given LSNs for")
        if rc != XL_OK:
            raise CorruptRecordError(f"WAL record {idx} at offset {pos}: {xl_error_text(rc)}")
        if have_lsns and idx != nl:
            raise CorruptRecordError(f"buffer holds {idx} records but {nl} LSNs were given")
        return _rows_batch(&r, min(pos, size))
    finally:
        _rows_free(&r)


# ---------------------------------------------------------------------------------------------
# PostgreSQL WAL segments: page headers, records across pages and segments

cdef enum:
    ST_START = 0        # at the start of the stream: skip a continuation, then read records
    ST_RECORD = 1       # at a record boundary
    ST_ASSEMBLE = 2     # inside a record that continues on the next page
    ST_SKIP_SEG = 3     # after XLOG_SWITCH: the rest of the segment is unused
    ST_DONE = 4

    MAX_RECORD = 0x3FFFFFFF  # PostgreSQL refuses records above 1 GB (AllocSizeIsValid)

# end reasons (set when the decoder stops)
cdef enum:
    END_NONE = 0
    END_ZERO = 1        # a zero xl_tot_len: the unwritten tail of the WAL
    END_RECYCLED = 2    # a page from an older cycle of a recycled segment file
    END_BAD_PAGE = 3
    END_BAD_RECORD = 4
    END_CONTRECORD = 5  # a continuation page without the contrecord flag or with a wrong length

_END_TEXT = {END_NONE: "", END_ZERO: "end of WAL (zero record length)",
             END_RECYCLED: "end of WAL (recycled page from an older cycle)",
             END_BAD_PAGE: "invalid page header", END_BAD_RECORD: "invalid record",
             END_CONTRECORD: "invalid continuation record"}


cdef class WalPageDecoder:
    """Decodes consecutive PostgreSQL WAL segment files into RecordBatches (see the module docstring)."""
    cdef readonly uint64_t seg_size, end_lsn, start_lsn
    cdef readonly bint strict
    cdef int state
    cdef uint64_t next_seg
    cdef bint started
    cdef uint8_t* asm
    cdef uint32_t asm_have, asm_need, asm_cap
    cdef uint64_t asm_lsn
    cdef uint32_t skip_left
    cdef int end
    cdef object detail

    def __cinit__(self):
        self.asm = NULL

    def __init__(self, uint64_t seg_size=DEFAULT_XLOG_SEG_SIZE, *, bint strict=False):
        if seg_size < XLOG_BLCKSZ or seg_size % XLOG_BLCKSZ or (seg_size & (seg_size - 1)):
            raise ValueError(f"WAL segment size must be a power of two multiple of {XLOG_BLCKSZ}, got {seg_size}")
        self.seg_size = seg_size
        self.strict = strict
        self.state = ST_START
        self.started = False
        self.end = END_NONE
        self.detail = ""

    def __dealloc__(self):
        free(self.asm)

    @property
    def done(self):
        return self.state == ST_DONE

    @property
    def end_reason(self):
        r = _END_TEXT[self.end]
        return f"{r}: {self.detail}" if self.detail else r

    cdef void _stop(self, int why, uint64_t lsn) noexcept nogil:
        self.state = ST_DONE
        self.end = why
        self.end_lsn = lsn

    def feed(self, data, uint64_t seg_start_lsn):
        """Decode one whole segment file that starts at seg_start_lsn; returns a RecordBatch."""
        cdef const uint8_t[::1] v = _bytes_view(data)
        cdef Rows r
        cdef int rc = 0
        if seg_start_lsn % self.seg_size:
            raise ValueError(f"segment start {seg_start_lsn:#x} is not a multiple of the segment size")
        if v.shape[0] != <Py_ssize_t>self.seg_size:
            raise CorruptWalPageError(
                f"WAL segment at {seg_start_lsn >> 32:X}/{seg_start_lsn & 0xFFFFFFFF:08X} is {v.shape[0]} "
                f"bytes, expected {self.seg_size}")
        if self.started and seg_start_lsn != self.next_seg:
            raise ValueError(f"segments must be fed in order: expected {self.next_seg:#x}, got {seg_start_lsn:#x}")
        if not self.started:
            self.started = True
            self.start_lsn = seg_start_lsn
        self.next_seg = seg_start_lsn + self.seg_size
        memset(&r, 0, sizeof(Rows))
        try:
            if self.state != ST_DONE:
                with nogil:
                    rc = self._segment(&v[0], seg_start_lsn, &r)
                if rc == -1:
                    raise MemoryError("WalPageDecoder: out of memory")
                if rc < -1:
                    self.detail = xl_error_text(rc + 100) if rc <= -100 else ""
                    if self.strict:
                        kind = CorruptRecordError if self.end == END_BAD_RECORD else CorruptWalPageError
                        raise kind(f"WAL at {self.end_lsn >> 32:X}/{self.end_lsn & 0xFFFFFFFF:08X}: "
                                   f"{self.end_reason}")
            return _rows_batch(&r, self.end_lsn)
        finally:
            _rows_free(&r)

    cdef int _segment(self, const uint8_t* seg, uint64_t seg_lsn, Rows* r) noexcept nogil:
        """0 = segment consumed; -1 = out of memory; < -1: stopped on corruption (strict raises)."""
        cdef uint64_t page, lsn
        cdef const uint8_t* p
        cdef uint32_t hdr, off, rem_len, take, tot_len
        cdef uint16_t magic, info
        cdef XLDecoded d
        cdef int rc
        cdef bint contrec
        if self.state == ST_SKIP_SEG:
            self.state = ST_RECORD
        cdef uint64_t npages = self.seg_size // XLOG_BLCKSZ, pi
        for pi in range(npages):
            page = pi * XLOG_BLCKSZ
            p = seg + page
            lsn = seg_lsn + page
            magic = _ld16(p)
            info = _ld16(p + 2)
            if _ld64(p + 8) != lsn:
                if magic == 0 and _ld64(p + 8) == 0:
                    self._stop(END_ZERO, lsn if self.state != ST_ASSEMBLE else self.asm_lsn)
                    return 0 if self.state != ST_ASSEMBLE or not self.strict else -3
                self._stop(END_RECYCLED, lsn if self.state != ST_ASSEMBLE else self.asm_lsn)
                return 0
            if magic != XLOG_PAGE_MAGIC or (info & ~XLP_ALL_FLAGS):
                self._stop(END_BAD_PAGE, lsn)
                return -3
            if page == 0:
                if not (info & XLP_LONG_HEADER) or _ld32(p + 32) != self.seg_size or _ld32(p + 36) != XLOG_BLCKSZ:
                    self._stop(END_BAD_PAGE, lsn)
                    return -3
                hdr = SIZE_OF_XLOG_LONG_PHD
            else:
                hdr = SIZE_OF_XLOG_SHORT_PHD
            contrec = (info & XLP_FIRST_IS_CONTRECORD) != 0
            rem_len = _ld32(p + 16)
            off = hdr
            if self.state == ST_START:
                # the stream starts inside a record that began in an earlier segment: skip it
                if contrec:
                    if rem_len > XLOG_BLCKSZ - hdr:
                        continue
                    off = <uint32_t>_maxalign(hdr + rem_len)
                self.state = ST_RECORD
            elif self.state == ST_ASSEMBLE:
                if not contrec or rem_len != self.asm_need - self.asm_have:
                    self._stop(END_CONTRECORD, self.asm_lsn)
                    return -5
                take = min(rem_len, XLOG_BLCKSZ - hdr)
                memcpy(self.asm + self.asm_have, p + hdr, take)
                self.asm_have += take
                if self.asm_have < self.asm_need:
                    continue
                rc = xl_decode(self.asm, self.asm_need, &d, True, False)
                if rc != XL_OK:
                    self._stop(END_BAD_RECORD, self.asm_lsn)
                    return rc - 100
                if _rows_add(r, self.asm_lsn, &d) < 0:
                    return -1
                self.state = ST_RECORD
                off = <uint32_t>_maxalign(hdr + take)
                self.end_lsn = lsn + off
                if d.rmid == RM_XLOG_ID and (d.info & XLR_RMGR_INFO_MASK) == XLOG_SWITCH:
                    self.state = ST_SKIP_SEG
                    self.end_lsn = seg_lsn + self.seg_size
                    return 0
            elif contrec and off == hdr:
                # a continuation where a record start was expected
                self._stop(END_CONTRECORD, lsn)
                return -5
            # records that start on this page
            while off + 4 <= XLOG_BLCKSZ:
                tot_len = _ld32(p + off)
                if tot_len == 0:
                    self._stop(END_ZERO, lsn + off)
                    return 0
                if tot_len < SIZE_OF_XLOG_RECORD or tot_len > MAX_RECORD:
                    self._stop(END_BAD_RECORD, lsn + off)
                    return XL_ERR_TOT_LEN - 100
                if off + tot_len <= XLOG_BLCKSZ:
                    rc = xl_decode(p + off, tot_len, &d, True, False)
                    if rc != XL_OK:
                        self._stop(END_BAD_RECORD, lsn + off)
                        return rc - 100
                    if _rows_add(r, lsn + off, &d) < 0:
                        return -1
                    if d.rmid == RM_XLOG_ID and (d.info & XLR_RMGR_INFO_MASK) == XLOG_SWITCH:
                        self.state = ST_SKIP_SEG
                        self.end_lsn = seg_lsn + self.seg_size
                        return 0
                    off = <uint32_t>_maxalign(off + tot_len)
                    self.end_lsn = lsn + off
                else:
                    # continues on the next page: gather it
                    if tot_len > self.asm_cap:
                        if not _grow(<void**>&self.asm, tot_len):
                            return -1
                        self.asm_cap = tot_len
                    take = XLOG_BLCKSZ - off
                    memcpy(self.asm, p + off, take)
                    self.asm_have = take
                    self.asm_need = tot_len
                    self.asm_lsn = lsn + off
                    self.state = ST_ASSEMBLE
                    break
        return 0
