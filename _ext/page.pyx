# cython: language_level=3
"""8 KiB slotted heap pages: tuple slots, page LSN, checksum (format in page.pxd, docs/page_format.md).

The Python functions take any writable 8192-byte buffer (bytearray, numpy uint8 row, memoryview);
the cdef functions are what redo and the primary run without the GIL.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.crc32c cimport crc32c_update
from logtide.errors import CorruptPageError, PageFullError, RedoError

cnp.import_array()

cdef uint8_t _zero2[2]
_zero2[0] = 0
_zero2[1] = 0


cdef int page_add_item(uint8_t* page, uint16_t offnum, const uint8_t* data, uint32_t length) noexcept nogil:
    cdef uint16_t n, lower, upper
    cdef uint32_t aligned, need
    if not page_header_ok(page):
        return PAGE_BAD_HEADER
    if length == 0 or length > MAX_TUPLE_SIZE:
        return PAGE_BAD_LENGTH
    n = page_nslots(page)
    if offnum < 1 or offnum > n + 1:
        return PAGE_BAD_OFFNUM
    if offnum <= n and item_flags(item_id(page, offnum)) != LP_UNUSED:
        return PAGE_BAD_OFFNUM
    lower = rd16(page + PD_LOWER)
    upper = rd16(page + PD_UPPER)
    aligned = (length + PAGE_ALIGN - 1) & ~(<uint32_t>PAGE_ALIGN - 1)
    need = aligned + (ITEM_ID_SIZE if offnum == n + 1 else 0)
    if <uint32_t>(upper - lower) < need:
        return PAGE_NO_SPACE
    upper -= aligned
    memcpy(page + upper, data, length)
    if aligned > length:
        memset(page + upper + length, 0, aligned - length)
    wr32(page + PAGE_HEADER_SIZE + (offnum - 1) * ITEM_ID_SIZE, make_item_id(upper, LP_NORMAL, length))
    wr16(page + PD_UPPER, upper)
    if offnum == n + 1:
        wr16(page + PD_LOWER, lower + ITEM_ID_SIZE)
    return PAGE_OK


cdef int page_kill_item(uint8_t* page, uint16_t offnum) noexcept nogil:
    # ItemIdMarkDead: the slot keeps its storage, readers no longer see the tuple
    cdef uint32_t iid
    if not page_header_ok(page):
        return PAGE_BAD_HEADER
    if offnum < 1 or offnum > page_nslots(page):
        return PAGE_BAD_OFFNUM
    iid = item_id(page, offnum)
    if item_flags(iid) != LP_NORMAL:
        return PAGE_BAD_OFFNUM
    wr32(page + PAGE_HEADER_SIZE + (offnum - 1) * ITEM_ID_SIZE,
         make_item_id(item_off(iid), LP_DEAD, item_len(iid)))
    return PAGE_OK


cdef int page_restore_image(uint8_t* page, const uint8_t* image, uint32_t length,
                            uint32_t hole_offset, uint32_t hole_length) noexcept nogil:
    if length + hole_length != PAGE_SIZE or hole_offset + hole_length > PAGE_SIZE:
        return PAGE_BAD_IMAGE
    if hole_length == 0:
        memcpy(page, image, PAGE_SIZE)
        return PAGE_OK
    memcpy(page, image, hole_offset)
    memset(page + hole_offset, 0, hole_length)
    memcpy(page + hole_offset + hole_length, image + hole_offset, PAGE_SIZE - hole_offset - hole_length)
    return PAGE_OK


cdef uint16_t page_checksum(const uint8_t* page, uint32_t blkno) noexcept nogil:
    # CRC-32C over the page with pd_checksum read as zero, mixed with the block number so a page
    # written to the wrong block fails; folded to 1..65535 like pg_checksum_page (0 means none).
    cdef uint32_t c = crc32c_update(0, page, PD_CHECKSUM)
    c = crc32c_update(c, _zero2, 2)
    c = crc32c_update(c, page + PD_CHECKSUM + 2, PAGE_SIZE - PD_CHECKSUM - 2)
    c ^= blkno
    return <uint16_t>((c % 65535) + 1)


cdef int page_verify(const uint8_t* page, uint32_t blkno) noexcept nogil:
    cdef Py_ssize_t i
    if page_is_new(page):
        for i in range(PAGE_SIZE):  # a new page must be all zeros (PageIsVerified)
            if page[i]:
                return PAGE_BAD_HEADER
        return PAGE_OK
    if not page_header_ok(page):
        return PAGE_BAD_HEADER
    if rd16(page + PD_CHECKSUM) != page_checksum(page, blkno):
        return PAGE_BAD_CHECKSUM
    return PAGE_OK


# ---------------------------------------------------------------- Python API

PAGE_SIZE_ = PAGE_SIZE
HEADER_SIZE = PAGE_HEADER_SIZE
MAX_TUPLE = MAX_TUPLE_SIZE

_MESSAGES = {
    PAGE_NO_SPACE: "the tuple does not fit in the page",
    PAGE_BAD_OFFNUM: "the slot is out of range or not in the state the operation needs",
    PAGE_BAD_HEADER: "the page header is inconsistent (lower/upper/special/version)",
    PAGE_BAD_CHECKSUM: "the page checksum does not match",
    PAGE_BAD_LENGTH: f"a tuple is 1..{MAX_TUPLE_SIZE} bytes",
    PAGE_BAD_IMAGE: "the full-page image length and hole do not add up to a page",
}


def raise_for(int code, str what=""):
    """Raise the typed error for a page result code (no-op for PAGE_OK)."""
    if code == PAGE_OK:
        return
    msg = _MESSAGES.get(code, f"page error {code}") + (f": {what}" if what else "")
    if code == PAGE_NO_SPACE:
        raise PageFullError(msg)
    if code in (PAGE_BAD_HEADER, PAGE_BAD_CHECKSUM):
        raise CorruptPageError(msg)
    raise RedoError(msg)


cdef uint8_t* _wpage(uint8_t[::1] buf) except NULL:
    if buf.shape[0] != PAGE_SIZE:
        raise ValueError(f"a page is {PAGE_SIZE} bytes, got {buf.shape[0]}")
    return &buf[0]


cdef const uint8_t* _rpage(const uint8_t[::1] buf) except NULL:
    if buf.shape[0] != PAGE_SIZE:
        raise ValueError(f"a page is {PAGE_SIZE} bytes, got {buf.shape[0]}")
    return &buf[0]


def new_page() -> bytearray:
    """An empty, initialized page."""
    b = bytearray(PAGE_SIZE)
    init(b)
    return b


def init(uint8_t[::1] buf) -> None:
    """Initialize `buf` as an empty heap page (PageInit)."""
    page_init(_wpage(buf))


def is_new(const uint8_t[::1] buf) -> bool:
    """True for a never-initialized (all-zero header) page."""
    return page_is_new(_rpage(buf))


def get_lsn(const uint8_t[::1] buf) -> int:
    return page_get_lsn(_rpage(buf))


def set_lsn(uint8_t[::1] buf, uint64_t lsn) -> None:
    page_set_lsn(_wpage(buf), lsn)


def nslots(const uint8_t[::1] buf) -> int:
    return page_nslots(_rpage(buf))


def free_space(const uint8_t[::1] buf) -> int:
    """Bytes available for one more tuple with a new slot (before MAXALIGN)."""
    cdef const uint8_t* p = _rpage(buf)
    if page_is_new(p):
        return 0
    return page_free_space(p)


def fits(const uint8_t[::1] buf, Py_ssize_t length) -> bool:
    """True when a tuple of `length` bytes fits with a new slot."""
    cdef const uint8_t* p = _rpage(buf)
    if page_is_new(p) or length <= 0 or length > MAX_TUPLE_SIZE:
        return False
    return ((length + PAGE_ALIGN - 1) & ~(PAGE_ALIGN - 1)) + ITEM_ID_SIZE <= \
        <int>rd16(p + PD_UPPER) - <int>rd16(p + PD_LOWER)


def add(uint8_t[::1] buf, int offnum, const uint8_t[::1] data) -> None:
    """Put tuple `data` at slot `offnum` (1-based; the next slot, or an unused one)."""
    cdef uint8_t* p = _wpage(buf)
    if offnum < 1 or offnum > 0xFFFF:
        raise_for(PAGE_BAD_OFFNUM, f"offnum {offnum}")
    if data.shape[0] == 0:
        raise_for(PAGE_BAD_LENGTH, "empty tuple")
    raise_for(page_add_item(p, <uint16_t>offnum, &data[0], data.shape[0]), f"offnum {offnum}")


def kill(uint8_t[::1] buf, int offnum) -> None:
    """Mark the tuple at `offnum` dead."""
    if offnum < 1 or offnum > 0xFFFF:
        raise_for(PAGE_BAD_OFFNUM, f"offnum {offnum}")
    raise_for(page_kill_item(_wpage(buf), <uint16_t>offnum), f"offnum {offnum}")


def get(const uint8_t[::1] buf, int offnum):
    """The live tuple at `offnum` as bytes, or None if the slot is dead, unused or absent."""
    cdef const uint8_t* p = _rpage(buf)
    cdef uint32_t iid
    if page_is_new(p) or offnum < 1 or offnum > page_nslots(p):
        return None
    iid = item_id(p, offnum)
    if item_flags(iid) != LP_NORMAL:
        return None
    if item_off(iid) + item_len(iid) > PAGE_SIZE:
        raise_for(PAGE_BAD_HEADER, f"slot {offnum} points outside the page")
    return (<const char*>p)[item_off(iid):item_off(iid) + item_len(iid)]


def items(const uint8_t[::1] buf) -> dict:
    """{offnum: tuple bytes} of every live tuple."""
    cdef const uint8_t* p = _rpage(buf)
    out = {}
    if page_is_new(p):
        return out
    for i in range(1, page_nslots(p) + 1):
        t = get(buf, i)
        if t is not None:
            out[i] = t
    return out


def checksum(const uint8_t[::1] buf, uint32_t blkno) -> int:
    """The checksum the page should carry at block `blkno`."""
    return page_checksum(_rpage(buf), blkno)


def set_checksum(uint8_t[::1] buf, uint32_t blkno) -> None:
    """Stamp the checksum into pd_checksum (done on every write to the page store)."""
    cdef uint8_t* p = _wpage(buf)
    if not page_is_new(p):
        wr16(p + PD_CHECKSUM, page_checksum(p, blkno))


def verify(const uint8_t[::1] buf, uint32_t blkno) -> int:
    """0 if the page is intact at `blkno` (or all zeros), else a negative PAGE_* code."""
    return page_verify(_rpage(buf), blkno)


def check(const uint8_t[::1] buf, uint32_t blkno, str where="") -> None:
    """Raise CorruptPageError unless the page is intact at `blkno`."""
    raise_for(page_verify(_rpage(buf), blkno), where or f"block {blkno}")


@cython.boundscheck(False)
@cython.wraparound(False)
def verify_many(const uint8_t[:, ::1] pages, const uint32_t[::1] blknos) -> np.ndarray:
    """Batch verify: an int8 array of page result codes, one per row of `pages`."""
    cdef Py_ssize_t n = pages.shape[0], i
    if pages.shape[1] != PAGE_SIZE or blknos.shape[0] != n:
        raise ValueError("pages is (n, 8192) uint8 and blknos has n entries")
    out = np.zeros(n, dtype=np.int8)
    cdef cnp.int8_t[::1] res = out
    with nogil:
        for i in range(n):
            res[i] = <cnp.int8_t>page_verify(&pages[i, 0], blknos[i])
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def set_checksum_many(uint8_t[:, ::1] pages, const uint32_t[::1] blknos) -> None:
    """Batch form of set_checksum."""
    cdef Py_ssize_t n = pages.shape[0], i
    if pages.shape[1] != PAGE_SIZE or blknos.shape[0] != n:
        raise ValueError("pages is (n, 8192) uint8 and blknos has n entries")
    with nogil:
        for i in range(n):
            if not page_is_new(&pages[i, 0]):
                wr16(&pages[i, 0] + PD_CHECKSUM, page_checksum(&pages[i, 0], blknos[i]))


@cython.boundscheck(False)
@cython.wraparound(False)
def lsn_many(const uint8_t[:, ::1] pages) -> np.ndarray:
    """The page LSN of every row, as uint64."""
    cdef Py_ssize_t n = pages.shape[0], i
    if pages.shape[1] != PAGE_SIZE:
        raise ValueError("pages is (n, 8192) uint8")
    out = np.empty(n, dtype=np.uint64)
    cdef cnp.uint64_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = page_get_lsn(&pages[i, 0])
    return out
