# cython: language_level=3
"""The WAL record encoder: logtide's WAL records in PostgreSQL 15's XLogRecord layout.

A record is the fixed 24-byte header, 0..N block headers (with image header and RelFileNode
unless SAME_REL), a short or long main-data header, then block images and data in block order,
then the main data; the CRC-32C covers everything after the header, then the header up to xl_crc.
Constants come from xlog_format.pxd; the layout is written out in docs/page_format.md.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.xlog_format cimport *
from logtide._ext.page cimport (PAGE_SIZE, PAGE_HEADER_SIZE, PD_LOWER, PD_UPPER, page_header_ok, page_is_new,
                                rd16, wr16, wr32, wr64)
from logtide._ext.redo cimport DecodedRecord, redo_decode
from logtide.errors import CorruptWALRecordError

cnp.import_array()

cdef enum:
    MAX_BLOCKS = 33                   # XLR_MAX_BLOCK_ID + 1
    MAX_BLOCK_DATA = 65535            # data_length is a u16
    # smaller records are encoded with the GIL held: dropping it costs more than the copy and CRC,
    # and a writer holds the WAL insert and page locks here, which others would then queue on
    NOGIL_RECORD = 65536


cdef struct BlockSpec:
    uint32_t tag[5]                   # spc, db, rel, fork, block
    uint8_t flags                     # caller's BKPBLOCK_WILL_INIT; HAS_DATA/HAS_IMAGE/SAME_REL are derived
    const uint8_t* data
    uint32_t data_len
    const uint8_t* page               # full-page image source, or NULL
    uint16_t hole_offset
    uint16_t hole_length


cdef inline void _image_hole(BlockSpec* b) noexcept nogil:
    # a standard page's free space between pd_lower and pd_upper is left out of the image
    cdef uint16_t lower, upper
    b.hole_offset = 0
    b.hole_length = 0
    if page_is_new(b.page) or not page_header_ok(b.page):
        return
    lower = rd16(b.page + PD_LOWER)
    upper = rd16(b.page + PD_UPPER)
    if lower >= PAGE_HEADER_SIZE and upper > lower and upper <= PAGE_SIZE:
        b.hole_offset = lower
        b.hole_length = upper - lower


cdef inline bint _same_rel(const BlockSpec* blocks, int i) noexcept nogil:
    return i > 0 and blocks[i].tag[0] == blocks[i - 1].tag[0] and blocks[i].tag[1] == blocks[i - 1].tag[1] \
        and blocks[i].tag[2] == blocks[i - 1].tag[2]


cdef size_t _record_size(BlockSpec* blocks, int nblocks, size_t main_len) noexcept nogil:
    cdef size_t n = SIZE_OF_XLOG_RECORD
    cdef int i
    for i in range(nblocks):
        n += SIZE_OF_BLOCK_HEADER + 4
        if not _same_rel(blocks, i):
            n += SIZE_OF_RELFILENODE
        if blocks[i].page != NULL:
            _image_hole(&blocks[i])
            n += SIZE_OF_IMAGE_HEADER + PAGE_SIZE - blocks[i].hole_length
        n += blocks[i].data_len
    if main_len:
        n += (2 if main_len <= 255 else 5) + main_len
    return n


cdef size_t _encode(uint8_t* out, uint8_t rmid, uint8_t info, uint32_t xid, uint64_t prev,
                    const BlockSpec* blocks, int nblocks, const uint8_t* main, size_t main_len,
                    size_t total) noexcept nogil:
    cdef size_t pos = SIZE_OF_XLOG_RECORD
    cdef int i
    cdef uint8_t flags
    cdef const BlockSpec* b
    cdef uint32_t crc
    for i in range(nblocks):
        b = &blocks[i]
        flags = b.flags & BKPBLOCK_WILL_INIT
        if b.data_len:
            flags |= BKPBLOCK_HAS_DATA
        if b.page != NULL:
            flags |= BKPBLOCK_HAS_IMAGE
        if _same_rel(blocks, i):
            flags |= BKPBLOCK_SAME_REL
        out[pos] = <uint8_t>i
        out[pos + 1] = <uint8_t>((b.tag[3] & BKPBLOCK_FORK_MASK) | flags)
        wr16(out + pos + 2, <uint16_t>b.data_len)
        pos += SIZE_OF_BLOCK_HEADER
        if b.page != NULL:
            wr16(out + pos, <uint16_t>(PAGE_SIZE - b.hole_length))
            wr16(out + pos + 2, b.hole_offset)
            out[pos + 4] = BKPIMAGE_APPLY | (BKPIMAGE_HAS_HOLE if b.hole_length else 0)
            pos += SIZE_OF_IMAGE_HEADER
        if not (flags & BKPBLOCK_SAME_REL):
            wr32(out + pos, b.tag[0])
            wr32(out + pos + 4, b.tag[1])
            wr32(out + pos + 8, b.tag[2])
            pos += SIZE_OF_RELFILENODE
        wr32(out + pos, b.tag[4])
        pos += 4
    if main_len:
        if main_len <= 255:
            out[pos] = XLR_BLOCK_ID_DATA_SHORT
            out[pos + 1] = <uint8_t>main_len
            pos += 2
        else:
            out[pos] = XLR_BLOCK_ID_DATA_LONG
            wr32(out + pos + 1, <uint32_t>main_len)
            pos += 5
    for i in range(nblocks):
        b = &blocks[i]
        if b.page != NULL:
            memcpy(out + pos, b.page, b.hole_offset)
            pos += b.hole_offset
            memcpy(out + pos, b.page + b.hole_offset + b.hole_length, PAGE_SIZE - b.hole_offset - b.hole_length)
            pos += PAGE_SIZE - b.hole_offset - b.hole_length
        if b.data_len:
            memcpy(out + pos, b.data, b.data_len)
            pos += b.data_len
    if main_len:
        memcpy(out + pos, main, main_len)
        pos += main_len
    wr32(out, <uint32_t>total)
    wr32(out + 4, xid)
    wr64(out + 8, prev)
    out[16] = info
    out[17] = rmid
    out[18] = 0
    out[19] = 0
    crc = crc32c_update(0, out + SIZE_OF_XLOG_RECORD, total - SIZE_OF_XLOG_RECORD)
    crc = crc32c_update(crc, out, XLOG_RECORD_CRC_OFFSET)
    wr32(out + XLOG_RECORD_CRC_OFFSET, crc)
    return pos


cdef bytes _build(uint8_t rmid, uint8_t info, uint32_t xid, uint64_t prev, BlockSpec* blocks, int nblocks,
                  const uint8_t* main, size_t main_len):
    cdef size_t total = _record_size(blocks, nblocks, main_len)
    if total > 0xFFFFFFFF:
        raise ValueError("a WAL record is at most 4 GiB")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    if total < NOGIL_RECORD:
        _encode(p, rmid, info, xid, prev, blocks, nblocks, main, main_len, total)
    else:
        with nogil:
            _encode(p, rmid, info, xid, prev, blocks, nblocks, main, main_len, total)
    return out


cdef void _set_tag(BlockSpec* b, tag) except *:
    cdef int i
    if len(tag) != 5:
        raise TypeError("tag is a PageTag (spc, db, rel, fork, block)")
    for i in range(5):
        v = tag[i]
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError(f"PageTag field {i} must fit in u32, got {v}")
        b.tag[i] = v
    if b.tag[3] > BKPBLOCK_FORK_MASK:
        raise ValueError(f"fork {b.tag[3]} does not fit the 4-bit fork field")


cdef void _clear(BlockSpec* b) noexcept:
    memset(b, 0, sizeof(BlockSpec))


# ---------------------------------------------------------------- Python API

def encode(int rmid, int info, uint32_t xid, uint64_t prev, blocks=(), main_data=b"") -> bytes:
    """A record from its parts.

    blocks: a sequence of (tag, data, image, will_init) with data bytes or None, image an
    8192-byte page or None (encoded with its hole left out, BKPIMAGE_APPLY set); block ids are
    the positions. SAME_REL is set when a block's relation equals the previous block's.
    """
    cdef BlockSpec specs[MAX_BLOCKS]
    cdef const uint8_t[::1] dv
    cdef const uint8_t[::1] iv
    cdef const uint8_t[::1] mv
    cdef int i, n = len(blocks)
    if not 0 <= rmid <= 255 or not 0 <= info <= 255:
        raise ValueError("rmid and info are u8")
    if n > MAX_BLOCKS:
        raise ValueError(f"a record references at most {MAX_BLOCKS} blocks")
    keep = []  # the memoryviews the specs point into stay alive until the record is built
    for i in range(n):
        tag, data, image, will_init = blocks[i]
        _clear(&specs[i])
        _set_tag(&specs[i], tag)
        if will_init:
            specs[i].flags = BKPBLOCK_WILL_INIT
        if data is not None and len(data):
            dv = memoryview(data).cast("B")
            if dv.shape[0] > MAX_BLOCK_DATA:
                raise ValueError(f"block data is at most {MAX_BLOCK_DATA} bytes, got {dv.shape[0]}")
            keep.append(dv)
            specs[i].data = &dv[0]
            specs[i].data_len = dv.shape[0]
        if image is not None:
            iv = memoryview(image).cast("B")
            if iv.shape[0] != PAGE_SIZE:
                raise ValueError(f"a full-page image is {PAGE_SIZE} bytes, got {iv.shape[0]}")
            keep.append(iv)
            specs[i].page = &iv[0]
    if main_data is not None and len(main_data):
        mv = memoryview(main_data).cast("B")
        return _build(rmid, info, xid, prev, specs, n, &mv[0], mv.shape[0])
    return _build(rmid, info, xid, prev, specs, n, NULL, 0)


def heap_insert(tag, int offnum, const uint8_t[::1] tup, uint32_t xid=0, uint64_t prev=0,
                bint init=False) -> bytes:
    """XLOG_HEAP_INSERT of tuple `tup` at slot `offnum` of page `tag` (INIT_PAGE: a fresh page)."""
    cdef BlockSpec b
    cdef uint8_t main[3]
    if not 1 <= offnum <= 0xFFFF:
        raise ValueError(f"offnum must be 1..65535, got {offnum}")
    if tup.shape[0] == 0 or tup.shape[0] > MAX_BLOCK_DATA:
        raise ValueError(f"a tuple is 1..{MAX_BLOCK_DATA} bytes, got {tup.shape[0]}")
    _clear(&b)
    _set_tag(&b, tag)
    b.flags = BKPBLOCK_WILL_INIT if init else 0
    b.data = &tup[0]
    b.data_len = tup.shape[0]
    wr16(main, <uint16_t>offnum)
    main[2] = 0
    return _build(RM_HEAP_ID, XLOG_HEAP_INSERT | (XLOG_HEAP_INIT_PAGE if init else 0), xid, prev,
                  &b, 1, main, 3)


def heap_delete(tag, int offnum, uint32_t xid=0, uint64_t prev=0) -> bytes:
    """XLOG_HEAP_DELETE of the tuple at slot `offnum` of page `tag`."""
    cdef BlockSpec b
    cdef uint8_t main[8]
    if not 1 <= offnum <= 0xFFFF:
        raise ValueError(f"offnum must be 1..65535, got {offnum}")
    _clear(&b)
    _set_tag(&b, tag)
    memset(main, 0, 8)
    wr32(main, xid)
    wr16(main + 4, <uint16_t>offnum)
    return _build(RM_HEAP_ID, XLOG_HEAP_DELETE, xid, prev, &b, 1, main, 8)


def heap_update(new_tag, int new_offnum, const uint8_t[::1] tup, old_tag, int old_offnum,
                uint32_t xid=0, uint64_t prev=0, bint init=False) -> bytes:
    """XLOG_HEAP_UPDATE: the new tuple at (new_tag, new_offnum), the old one at (old_tag, old_offnum) dies.

    Block 0 is the new tuple's page; block 1, the old page, is present only when the pages differ.
    """
    cdef BlockSpec b[2]
    cdef uint8_t main[14]
    cdef int n = 1
    if not 1 <= new_offnum <= 0xFFFF or not 1 <= old_offnum <= 0xFFFF:
        raise ValueError("offnums must be 1..65535")
    if tup.shape[0] == 0 or tup.shape[0] > MAX_BLOCK_DATA:
        raise ValueError(f"a tuple is 1..{MAX_BLOCK_DATA} bytes, got {tup.shape[0]}")
    _clear(&b[0])
    _clear(&b[1])
    _set_tag(&b[0], new_tag)
    b[0].flags = BKPBLOCK_WILL_INIT if init else 0
    b[0].data = &tup[0]
    b[0].data_len = tup.shape[0]
    if tuple(old_tag) != tuple(new_tag):
        _set_tag(&b[1], old_tag)
        n = 2
    elif init:
        raise ValueError("an update within one page cannot initialize that page")
    memset(main, 0, 14)
    wr32(main, xid)
    wr16(main + 4, <uint16_t>old_offnum)
    wr32(main + 8, xid)
    wr16(main + 12, <uint16_t>new_offnum)
    return _build(RM_HEAP_ID, XLOG_HEAP_UPDATE | (XLOG_HEAP_INIT_PAGE if init else 0), xid, prev,
                  b, n, main, 14)


def full_page_images(tags, pages, uint32_t xid=0, uint64_t prev=0) -> bytes:
    """XLOG_FPI: full images of up to 33 pages (each with its pd_lower..pd_upper hole left out)."""
    cdef BlockSpec specs[MAX_BLOCKS]
    cdef const uint8_t[::1] pv
    cdef int i, n = len(tags)
    if n != len(pages) or n == 0 or n > MAX_BLOCKS:
        raise ValueError(f"1..{MAX_BLOCKS} tags and as many pages")
    keep = []
    for i in range(n):
        _clear(&specs[i])
        _set_tag(&specs[i], tags[i])
        pv = memoryview(pages[i]).cast("B")
        if pv.shape[0] != PAGE_SIZE:
            raise ValueError(f"a page is {PAGE_SIZE} bytes, got {pv.shape[0]}")
        keep.append(pv)
        specs[i].page = &pv[0]
    return _build(RM_XLOG_ID, XLOG_FPI, xid, prev, specs, n, NULL, 0)


cdef size_t _meta_into(const uint8_t* rec, const DecodedRecord* r, uint8_t* out) noexcept nogil:
    memcpy(out, rec, r.headers_len)
    if r.main_len:
        memcpy(out + r.headers_len, r.main_data, r.main_len)
    return r.headers_len + r.main_len


def wal_meta(const uint8_t[::1] record) -> bytes:
    """The WAL meta of a full record: header + block headers + main data, no block data or images.

    The header keeps the full record's xl_tot_len and xl_crc.
    """
    cdef DecodedRecord r
    cdef int rc
    if record.shape[0] == 0:
        raise CorruptWALRecordError("empty WAL record")
    rc = redo_decode(&record[0], record.shape[0], &r, False, True)
    if rc != 0:
        raise CorruptWALRecordError(f"malformed WAL record (code {rc})")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, r.headers_len + r.main_len)
    _meta_into(&record[0], &r, <uint8_t*>PyBytes_AS_STRING(out))
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def wal_meta_many(const uint8_t[::1] records, const int64_t[::1] offsets) -> tuple:
    """Batch wal_meta over concatenated records: (metas uint8 array, meta offsets int64[n + 1])."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, i
    cdef DecodedRecord r
    cdef int rc = 0
    cdef Py_ssize_t bad = -1
    cdef int64_t pos = 0
    if n < 0:
        raise ValueError("offsets has n + 1 entries")
    for i in range(n):
        if offsets[i] < 0 or offsets[i] >= offsets[i + 1] or offsets[i + 1] > records.shape[0]:
            raise ValueError(f"offsets[{i}:{i + 2}] is not a non-empty range inside records")
    out = np.empty(records.shape[0], dtype=np.uint8)  # metas are never longer than their records
    outoff = np.empty(n + 1, dtype=np.int64)
    cdef uint8_t[::1] o = out
    cdef int64_t[::1] oo = outoff
    with nogil:
        oo[0] = 0
        for i in range(n):
            rc = redo_decode(&records[offsets[i]], offsets[i + 1] - offsets[i], &r, False, True)
            if rc != 0:
                bad = i
                break
            pos += _meta_into(&records[offsets[i]], &r, &o[pos])
            oo[i + 1] = pos
    if bad >= 0:
        raise CorruptWALRecordError(f"WAL record #{bad} is malformed (code {rc})")
    return out[:pos].copy(), outoff
