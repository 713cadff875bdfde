# cython: language_level=3
"""Redo: apply a WAL record to the pages it references, idempotently by page LSN.

Per call (`apply`) and in batches (`apply_batch`, GIL released). A record whose LSN is at or
below the page LSN is skipped, so replaying any suffix of a page's LSN list twice is harmless.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memset
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.xlog_format cimport *
from logtide._ext.page cimport (PAGE_SIZE, PAGE_OK, page_get_lsn, page_set_lsn, page_is_new, page_init,
                                page_add_item, page_kill_item, page_restore_image, rd16, rd32, rd64)
from logtide.errors import CorruptWALRecordError, RedoError

cnp.import_array()

# byte offsets in the main data of the heap records (PostgreSQL's xl_heap_* structs)
cdef enum:
    INSERT_OFFNUM = 0                 # xl_heap_insert: offnum u16, flags u8
    SIZE_OF_HEAP_INSERT = 3
    DELETE_OFFNUM = 4                 # xl_heap_delete: xmax u32, offnum u16, infobits u8, flags u8
    SIZE_OF_HEAP_DELETE = 8
    UPDATE_OLD_OFFNUM = 4             # xl_heap_update: old_xmax u32, old_offnum u16, old_infobits u8,
    UPDATE_NEW_OFFNUM = 12            #   flags u8, new_xmax u32, new_offnum u16
    SIZE_OF_HEAP_UPDATE = 14


cdef int redo_decode(const uint8_t* rec, size_t length, DecodedRecord* out, bint meta,
                     bint check_crc) noexcept nogil:
    cdef size_t pos = SIZE_OF_XLOG_RECORD, datatotal = 0, end
    cdef uint8_t block_id, fork_flags
    cdef int last_id = -1, i
    cdef BlockRef* b
    cdef BlockRef* prevb = NULL
    cdef bint has_main = False
    if length < SIZE_OF_XLOG_RECORD:
        return REDO_BAD_RECORD
    out.tot_len = rd32(rec)
    out.xid = rd32(rec + 4)
    out.prev = rd64(rec + 8)
    out.info = rec[16]
    out.rmid = rec[17]
    out.crc = rd32(rec + XLOG_RECORD_CRC_OFFSET)
    out.max_block_id = -1
    out.main_data = NULL
    out.main_len = 0
    if out.tot_len < SIZE_OF_XLOG_RECORD:
        return REDO_BAD_RECORD
    if meta:
        end = length
        if end > out.tot_len:
            return REDO_BAD_RECORD
    else:
        if length < out.tot_len:
            return REDO_BAD_RECORD
        end = out.tot_len
    for i in range(XLR_MAX_BLOCK_ID + 1):
        out.blocks[i].in_use = 0
    # block headers, then at most one main-data header, which ends the header section
    while (meta and pos < end) or (not meta and end - pos > datatotal):
        block_id = rec[pos]
        if block_id == XLR_BLOCK_ID_DATA_SHORT:
            if pos + 2 > end:
                return REDO_BAD_RECORD
            out.main_len = rec[pos + 1]
            pos += 2
            has_main = True
            break
        if block_id == XLR_BLOCK_ID_DATA_LONG:
            if pos + 5 > end:
                return REDO_BAD_RECORD
            out.main_len = rd32(rec + pos + 1)
            pos += 5
            has_main = True
            break
        if block_id == XLR_BLOCK_ID_ORIGIN:
            pos += 3
            continue
        if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
            pos += 5
            continue
        if block_id > XLR_MAX_BLOCK_ID or <int>block_id <= last_id:
            return REDO_BAD_RECORD
        if pos + SIZE_OF_BLOCK_HEADER > end:
            return REDO_BAD_RECORD
        last_id = block_id
        b = &out.blocks[block_id]
        fork_flags = rec[pos + 1]
        b.fork = fork_flags & BKPBLOCK_FORK_MASK
        b.flags = fork_flags & BKPBLOCK_FLAG_MASK
        b.data_len = rd16(rec + pos + 2)
        b.data = NULL
        b.image = NULL
        b.bimg_len = 0
        b.bimg_info = 0
        b.hole_offset = 0
        b.hole_length = 0
        pos += SIZE_OF_BLOCK_HEADER
        if (b.flags & BKPBLOCK_HAS_DATA) == 0 and b.data_len:
            return REDO_BAD_RECORD
        if b.flags & BKPBLOCK_HAS_IMAGE:
            if pos + SIZE_OF_IMAGE_HEADER > end:
                return REDO_BAD_RECORD
            b.bimg_len = rd16(rec + pos)
            b.hole_offset = rd16(rec + pos + 2)
            b.bimg_info = rec[pos + 4]
            pos += SIZE_OF_IMAGE_HEADER
            if b.bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD):
                if b.bimg_info & BKPIMAGE_HAS_HOLE:
                    if pos + SIZE_OF_COMPRESS_HEADER > end:
                        return REDO_BAD_RECORD
                    b.hole_length = rd16(rec + pos)
                    pos += SIZE_OF_COMPRESS_HEADER
            else:
                if b.bimg_len > BLCKSZ or b.bimg_len == 0:
                    return REDO_BAD_RECORD
                b.hole_length = BLCKSZ - b.bimg_len
                if (b.bimg_info & BKPIMAGE_HAS_HOLE) == 0 and b.hole_length:
                    return REDO_BAD_RECORD
                if b.hole_offset + b.hole_length > BLCKSZ:
                    return REDO_BAD_RECORD
            datatotal += b.bimg_len
        if b.flags & BKPBLOCK_SAME_REL:
            if prevb == NULL:
                return REDO_BAD_RECORD
            b.spc = prevb.spc
            b.db = prevb.db
            b.rel = prevb.rel
        else:
            if pos + SIZE_OF_RELFILENODE > end:
                return REDO_BAD_RECORD
            b.spc = rd32(rec + pos)
            b.db = rd32(rec + pos + 4)
            b.rel = rd32(rec + pos + 8)
            pos += SIZE_OF_RELFILENODE
        if pos + 4 > end:
            return REDO_BAD_RECORD
        b.blkno = rd32(rec + pos)
        pos += 4
        datatotal += b.data_len
        b.in_use = 1
        prevb = b
        out.max_block_id = block_id
    out.headers_len = <uint32_t>pos
    if meta:
        # WAL meta: the main data follows the headers directly
        if pos + out.main_len != end:
            return REDO_BAD_RECORD
        if end + datatotal != out.tot_len:
            return REDO_BAD_RECORD  # a meta cut at a block boundary: the full length no longer adds up
        if has_main:
            out.main_data = rec + pos
        return 0
    if pos + datatotal + out.main_len != end:
        return REDO_BAD_RECORD
    for i in range(out.max_block_id + 1):
        b = &out.blocks[i]
        if not b.in_use:
            continue
        if b.flags & BKPBLOCK_HAS_IMAGE:
            b.image = rec + pos
            pos += b.bimg_len
        if b.flags & BKPBLOCK_HAS_DATA:
            b.data = rec + pos
            pos += b.data_len
    if has_main:
        out.main_data = rec + pos
    if check_crc and crc32c_update(crc32c_update(0, rec + SIZE_OF_XLOG_RECORD, end - SIZE_OF_XLOG_RECORD),
                     rec, XLOG_RECORD_CRC_OFFSET) != out.crc:
        return REDO_BAD_CRC
    return 0


cdef int redo_find_block(const DecodedRecord* r, uint32_t spc, uint32_t db, uint32_t rel,
                         uint32_t fork, uint32_t blkno) noexcept nogil:
    cdef int i
    cdef const BlockRef* b
    for i in range(r.max_block_id + 1):
        b = &r.blocks[i]
        if b.in_use and b.blkno == blkno and b.rel == rel and b.db == db and b.spc == spc and b.fork == fork:
            return i
    return REDO_NOT_IN_RECORD


cdef int redo_block(uint8_t* page, const DecodedRecord* r, int block_id, uint64_t lsn) noexcept nogil:
    cdef const BlockRef* b = &r.blocks[block_id]
    cdef uint8_t op
    cdef uint16_t offnum
    cdef int rc
    if not page_is_new(page) and lsn <= page_get_lsn(page):
        return REDO_SKIPPED
    if b.flags & BKPBLOCK_HAS_IMAGE and b.bimg_info & BKPIMAGE_APPLY:
        if b.bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD):
            return REDO_UNSUPPORTED
        rc = page_restore_image(page, b.image, b.bimg_len, b.hole_offset, b.hole_length)
        if rc != PAGE_OK:
            return REDO_BAD_RECORD
        page_set_lsn(page, lsn)
        return REDO_APPLIED
    if b.flags & BKPBLOCK_WILL_INIT:
        page_init(page)
    elif page_is_new(page):
        return REDO_PAGE_MISSING
    if r.rmid == RM_HEAP_ID:
        op = r.info & XLOG_HEAP_OPMASK
        if op == XLOG_HEAP_INSERT:
            if r.main_len < SIZE_OF_HEAP_INSERT or not (b.flags & BKPBLOCK_HAS_DATA) or block_id != 0:
                return REDO_BAD_MAIN_DATA
            rc = page_add_item(page, rd16(r.main_data + INSERT_OFFNUM), b.data, b.data_len)
        elif op == XLOG_HEAP_DELETE:
            if r.main_len < SIZE_OF_HEAP_DELETE or block_id != 0:
                return REDO_BAD_MAIN_DATA
            rc = page_kill_item(page, rd16(r.main_data + DELETE_OFFNUM))
        elif op == XLOG_HEAP_UPDATE or op == XLOG_HEAP_HOT_UPDATE:
            if r.main_len < SIZE_OF_HEAP_UPDATE:
                return REDO_BAD_MAIN_DATA
            if block_id == 0:
                # block 0 is the new tuple's page; the old tuple is here too unless block 1 exists
                if not (b.flags & BKPBLOCK_HAS_DATA):
                    return REDO_BAD_MAIN_DATA
                if r.max_block_id < 1:
                    rc = page_kill_item(page, rd16(r.main_data + UPDATE_OLD_OFFNUM))
                    if rc != PAGE_OK:
                        return REDO_PAGE_OP
                rc = page_add_item(page, rd16(r.main_data + UPDATE_NEW_OFFNUM), b.data, b.data_len)
            elif block_id == 1:
                rc = page_kill_item(page, rd16(r.main_data + UPDATE_OLD_OFFNUM))
            else:
                return REDO_BAD_RECORD
        else:
            return REDO_UNSUPPORTED
        if rc != PAGE_OK:
            return REDO_PAGE_OP
    elif r.rmid == RM_XLOG_ID and (r.info & XLR_RMGR_INFO_MASK) in (XLOG_FPI, XLOG_FPI_FOR_HINT):
        return REDO_BAD_RECORD  # an FPI record whose block has no image to apply
    else:
        return REDO_UNSUPPORTED
    page_set_lsn(page, lsn)
    return REDO_APPLIED


cdef inline int _apply_one(uint8_t* page, const uint8_t* rec, size_t length, uint64_t lsn,
                           const uint32_t* tag, DecodedRecord* r) noexcept nogil:
    cdef int rc = redo_decode(rec, length, r, False, True)
    if rc != 0:
        return rc
    rc = redo_find_block(r, tag[0], tag[1], tag[2], tag[3], tag[4])
    if rc < 0:
        return rc
    return redo_block(page, r, rc, lsn)


# ---------------------------------------------------------------- Python API

APPLIED = REDO_APPLIED
SKIPPED = REDO_SKIPPED
BAD_RECORD = REDO_BAD_RECORD
BAD_CRC = REDO_BAD_CRC
NOT_IN_RECORD = REDO_NOT_IN_RECORD

_MESSAGES = {
    REDO_BAD_RECORD: "record lengths or block references are malformed",
    REDO_BAD_CRC: "incorrect resource manager data checksum (the record's CRC-32C does not match)",
    REDO_NOT_IN_RECORD: "the record references no block with this PageTag",
    REDO_UNSUPPORTED: "no redo for this resource manager/info",
    REDO_PAGE_MISSING: "the record needs an existing page but the page is new (all zeros)",
    REDO_BAD_MAIN_DATA: "main data or block data missing or too short for the record type",
    REDO_PAGE_OP: "the page operation failed: slot or free space disagrees with the WAL",
}


def raise_for(int code, object lsn=None):
    """Raise the typed error for a redo result code (no-op for APPLIED/SKIPPED)."""
    if code >= 0:
        return
    where = f" (LSN {lsn})" if lsn is not None else ""
    msg = _MESSAGES.get(code, f"redo error {code}") + where
    if code in (REDO_BAD_RECORD, REDO_BAD_CRC):
        raise CorruptWALRecordError(msg)
    raise RedoError(msg)


def apply(uint8_t[::1] page, tag, const uint8_t[::1] record, uint64_t lsn) -> int:
    """Apply `record` (at `lsn`) to `page`, the block `tag` of it. Returns APPLIED or SKIPPED."""
    cdef DecodedRecord r
    cdef uint32_t t[5]
    cdef int rc, i
    if page.shape[0] != PAGE_SIZE:
        raise ValueError(f"a page is {PAGE_SIZE} bytes, got {page.shape[0]}")
    if len(tag) != 5:
        raise TypeError("tag is a PageTag (spc, db, rel, fork, block)")
    for i in range(5):
        t[i] = tag[i]
    if record.shape[0] == 0:
        raise_for(REDO_BAD_RECORD, lsn)
    with nogil:
        rc = _apply_one(&page[0], &record[0], record.shape[0], lsn, t, &r)
    raise_for(rc, lsn)
    return rc


def apply_batch(uint8_t[:, ::1] pages, const int64_t[::1] page_rows, const uint32_t[:, ::1] tags,
                const uint8_t[::1] records, const int64_t[::1] offsets, const uint64_t[::1] lsns) -> tuple:
    """Apply n (page, record, LSN) entries in order, without the GIL.

    Entry i applies records[offsets[i]:offsets[i+1]] at lsns[i] to pages[page_rows[i]], the
    block tags[i] of that record. Stops at the first error. Returns (results int8[n], applied,
    first_error_index or -1); results past an error are left at SKIPPED.
    """
    if offsets.shape[0] != page_rows.shape[0] + 1:
        raise ValueError("page_rows, tags (n, 5), lsns have n entries and offsets n + 1")
    return apply_ranges(pages, page_rows, tags, records, offsets[:offsets.shape[0] - 1], offsets[1:], lsns)


@cython.boundscheck(False)
@cython.wraparound(False)
def apply_ranges(uint8_t[:, ::1] pages, const int64_t[::1] page_rows, const uint32_t[:, ::1] tags,
                 const uint8_t[::1] records, const int64_t[:] starts, const int64_t[:] ends,
                 const uint64_t[::1] lsns) -> tuple:
    """apply_batch with entry i's record at records[starts[i]:ends[i]]: entries may share a record
    (a multi-page record applied to each of its pages) without copying it."""
    cdef Py_ssize_t n = page_rows.shape[0], i, npages = pages.shape[0]
    cdef int64_t a, z
    cdef int rc = 0
    cdef Py_ssize_t applied = 0, bad = -1
    cdef DecodedRecord r
    if pages.shape[1] != PAGE_SIZE:
        raise ValueError("pages is (m, 8192) uint8")
    if tags.shape[0] != n or tags.shape[1] != 5 or lsns.shape[0] != n or starts.shape[0] != n or ends.shape[0] != n:
        raise ValueError("page_rows, tags (n, 5), lsns, starts and ends have n entries")
    for i in range(n):
        if page_rows[i] < 0 or page_rows[i] >= npages:
            raise IndexError(f"page_rows[{i}] = {page_rows[i]} is outside pages")
        if starts[i] < 0 or starts[i] > ends[i] or ends[i] > records.shape[0]:
            raise ValueError(f"entry {i}: [{starts[i]}, {ends[i]}) is not a range inside records")
    out = np.zeros(n, dtype=np.int8)
    cdef cnp.int8_t[::1] res = out
    with nogil:
        for i in range(n):
            a = starts[i]
            z = ends[i]
            if z == a:
                rc = REDO_BAD_RECORD
            else:
                rc = _apply_one(&pages[page_rows[i], 0], &records[a], z - a, lsns[i], &tags[i, 0], &r)
            res[i] = <cnp.int8_t>rc
            if rc < 0:
                bad = i
                break
            applied += rc
    return out, applied, bad


def decode(const uint8_t[::1] record, bint meta=False) -> dict:
    """A record (or WAL meta) as a dict, for tools and tests; raises CorruptWALRecordError."""
    cdef DecodedRecord r
    cdef int rc, i
    cdef const BlockRef* b
    if record.shape[0] == 0:
        raise_for(REDO_BAD_RECORD)
    rc = redo_decode(&record[0], record.shape[0], &r, meta, True)
    raise_for(rc)
    base = <size_t>&record[0]
    raw = bytes(record)
    blocks = []
    for i in range(r.max_block_id + 1):
        b = &r.blocks[i]
        if not b.in_use:
            continue
        data = image = None
        if b.data != NULL:
            o = <size_t>b.data - base
            data = raw[o:o + b.data_len]
        if b.image != NULL:
            o = <size_t>b.image - base
            image = raw[o:o + b.bimg_len]
        blocks.append({
            "block_id": i, "tag": (b.spc, b.db, b.rel, b.fork, b.blkno), "flags": b.flags,
            "data_len": b.data_len, "data": data, "image": image, "bimg_len": b.bimg_len,
            "bimg_info": b.bimg_info, "hole_offset": b.hole_offset, "hole_length": b.hole_length,
        })
    main = None
    if r.main_data != NULL:
        o = <size_t>r.main_data - base
        main = raw[o:o + r.main_len]
    return {"tot_len": r.tot_len, "xid": r.xid, "prev": r.prev, "info": r.info, "rmid": r.rmid,
            "crc": r.crc, "blocks": blocks, "main_data": main, "headers_len": r.headers_len}


@cython.boundscheck(False)
@cython.wraparound(False)
def meta_tags(const uint8_t[::1] metas, const int64_t[::1] offsets) -> tuple:
    """The PageTags of a batch of WAL metas: (tags (k, 5) uint32, record_index (k,) int64).

    Raises CorruptWALRecordError naming the first malformed meta.
    """
    cdef Py_ssize_t n = offsets.shape[0] - 1, i, k = 0, cap
    cdef int rc = 0, j
    cdef DecodedRecord r
    cdef Py_ssize_t bad = -1
    if n < 0:
        raise ValueError("offsets has n + 1 entries")
    for i in range(n):
        if offsets[i] < 0 or offsets[i] > offsets[i + 1] or offsets[i + 1] > metas.shape[0]:
            raise ValueError(f"offsets[{i}:{i + 2}] is not a range inside metas")
    cap = n * 2 + 8
    tags = np.empty((cap, 5), dtype=np.uint32)
    idx = np.empty(cap, dtype=np.int64)
    cdef cnp.uint32_t[:, ::1] t = tags
    cdef int64_t[::1] ix = idx
    i = 0
    while i < n:
        with nogil:
            while i < n:
                if offsets[i + 1] == offsets[i]:
                    bad = i
                    break
                rc = redo_decode(&metas[offsets[i]], offsets[i + 1] - offsets[i], &r, True, True)
                if rc != 0:
                    bad = i
                    break
                if k + r.max_block_id + 1 > cap:
                    break  # grow outside nogil, then redo this record
                for j in range(r.max_block_id + 1):
                    if r.blocks[j].in_use:
                        t[k, 0] = r.blocks[j].spc
                        t[k, 1] = r.blocks[j].db
                        t[k, 2] = r.blocks[j].rel
                        t[k, 3] = r.blocks[j].fork
                        t[k, 4] = r.blocks[j].blkno
                        ix[k] = i
                        k += 1
                i += 1
        if bad >= 0:
            raise CorruptWALRecordError(f"WAL meta #{bad} is malformed")
        if i < n:
            cap *= 2
            tags = np.resize(tags, (cap, 5))
            idx = np.resize(idx, cap)
            t = tags
            ix = idx
    return tags[:k].copy(), idx[:k].copy()
