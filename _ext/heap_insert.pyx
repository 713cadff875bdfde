# cython: language_level=3
"""One single-tuple heap insert into a buffer-pool frame, with its WAL record, in one call.

    offnum, record = apply_insert(frames, f, tag, tup, xid, lsn, init)

The record (XLOG_HEAP_INSERT, prev = lsn - 1) is encoded first, so a refused tuple leaves the page
as it was; then the page is initialized (init), gets the tuple at the next slot and the LSN `lsn`.
The same bytes and page as xlogwriter.heap_insert followed by page.init/add/set_lsn.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

from logtide._ext.page cimport (MAX_TUPLE_SIZE, PAGE_BAD_LENGTH, PAGE_OK, PAGE_SIZE, page_add_item,
                                page_init, page_nslots, page_set_lsn)
from logtide._ext import page as _page
from logtide._ext import xlogwriter as _xlogwriter

_encode = _xlogwriter.heap_insert
_raise_for = _page.raise_for


def apply_insert(uint8_t[:, ::1] frames, Py_ssize_t f, tag, const uint8_t[::1] tup, uint32_t xid,
                 uint64_t lsn, bint init) -> tuple:
    """Insert `tup` into frame `f` of `frames` (a new page when `init`); its (offnum, WAL record)."""
    if frames.shape[1] != PAGE_SIZE:
        raise ValueError(f"a frame is {PAGE_SIZE} bytes, got {frames.shape[1]}")
    if not 0 <= f < frames.shape[0]:
        raise IndexError(f"frame {f} is not one of {frames.shape[0]}")
    if lsn == 0:
        raise ValueError("a record's LSN is at least 1")
    return insert_into(&frames[f, 0], tag, tup, xid, lsn, init)


cdef tuple insert_into(uint8_t* page, tag, const uint8_t[::1] tup, uint32_t xid, uint64_t lsn, bint init):
    cdef int offnum, code
    if tup.shape[0] > MAX_TUPLE_SIZE:   # before init: a refused tuple leaves even a new page alone
        _raise_for(PAGE_BAD_LENGTH, f"{tup.shape[0]} bytes")
    offnum = 1 if init else page_nslots(page) + 1
    record = _encode(tag, offnum, tup, xid, lsn - 1, init)   # raises before the page changes
    if init:
        page_init(page)
    code = page_add_item(page, <uint16_t>offnum, &tup[0], <uint32_t>tup.shape[0])
    if code != PAGE_OK:
        _raise_for(code, f"offnum {offnum}")
    page_set_lsn(page, lsn)
    return offnum, record
