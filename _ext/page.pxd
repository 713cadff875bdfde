# The 8 KiB slotted heap page: the format shared by redo, the buffer pool and the page store.
# Layout of PostgreSQL's heap page (bufpage.h, itemid.h); full text in docs/page_format.md.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef enum:
    PAGE_SIZE = 8192
    PAGE_HEADER_SIZE = 24             # PageHeaderData up to pd_linp
    ITEM_ID_SIZE = 4                  # ItemIdData: lp_off:15, lp_flags:2, lp_len:15
    PAGE_ALIGN = 8                    # MAXALIGN of tuples
    PD_LSN_HI = 0                     # u32 xlogid (LSN >> 32)
    PD_LSN_LO = 4                     # u32 xrecoff (LSN & 0xFFFFFFFF)
    PD_CHECKSUM = 8                   # u16
    PD_FLAGS = 10                     # u16
    PD_LOWER = 12                     # u16: end of the slot array
    PD_UPPER = 14                     # u16: start of tuple space
    PD_SPECIAL = 16                   # u16: start of special space (= PAGE_SIZE for heap)
    PD_PAGESIZE_VERSION = 18          # u16: PAGE_SIZE | layout version
    PD_PRUNE_XID = 20                 # u32
    PAGE_LAYOUT_VERSION = 4
    MAX_TUPLE_SIZE = 8160             # PAGE_SIZE - PAGE_HEADER_SIZE - ITEM_ID_SIZE, MAXALIGNed down
    MAX_OFFNUM = 2042                 # (PAGE_SIZE - PAGE_HEADER_SIZE) / ITEM_ID_SIZE
    LP_UNUSED = 0
    LP_NORMAL = 1
    LP_REDIRECT = 2
    LP_DEAD = 3

# Results of the page operations (0 = done; negative = the page or the request is inconsistent).
cdef enum:
    PAGE_OK = 0
    PAGE_NO_SPACE = -1                # the tuple does not fit
    PAGE_BAD_OFFNUM = -2              # slot out of range, or not in the state the operation needs
    PAGE_BAD_HEADER = -3              # lower/upper/special/version out of range
    PAGE_BAD_CHECKSUM = -4
    PAGE_BAD_LENGTH = -5              # tuple empty or larger than MAX_TUPLE_SIZE
    PAGE_BAD_IMAGE = -6               # a full-page image whose length and hole do not add up to a page


cdef inline uint16_t rd16(const uint8_t* p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v

cdef inline uint32_t rd32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v

cdef inline uint64_t rd64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v

cdef inline void wr16(uint8_t* p, uint16_t v) noexcept nogil:
    memcpy(p, &v, 2)

cdef inline void wr32(uint8_t* p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)

cdef inline void wr64(uint8_t* p, uint64_t v) noexcept nogil:
    memcpy(p, &v, 8)


cdef inline uint64_t page_get_lsn(const uint8_t* page) noexcept nogil:
    return (<uint64_t>rd32(page + PD_LSN_HI) << 32) | rd32(page + PD_LSN_LO)

cdef inline void page_set_lsn(uint8_t* page, uint64_t lsn) noexcept nogil:
    wr32(page + PD_LSN_HI, <uint32_t>(lsn >> 32))
    wr32(page + PD_LSN_LO, <uint32_t>(lsn & 0xFFFFFFFFu))

cdef inline bint page_is_new(const uint8_t* page) noexcept nogil:
    # PageIsNew: an all-zero page (never initialized) has pd_upper == 0
    return rd16(page + PD_UPPER) == 0

cdef inline uint16_t page_nslots(const uint8_t* page) noexcept nogil:
    cdef uint16_t lower = rd16(page + PD_LOWER)
    if lower <= PAGE_HEADER_SIZE:
        return 0
    return (lower - PAGE_HEADER_SIZE) // ITEM_ID_SIZE

cdef inline void page_init(uint8_t* page) noexcept nogil:
    memset(page, 0, PAGE_SIZE)
    wr16(page + PD_LOWER, PAGE_HEADER_SIZE)
    wr16(page + PD_UPPER, PAGE_SIZE)
    wr16(page + PD_SPECIAL, PAGE_SIZE)
    wr16(page + PD_PAGESIZE_VERSION, PAGE_SIZE | PAGE_LAYOUT_VERSION)

cdef inline uint32_t item_id(const uint8_t* page, uint16_t offnum) noexcept nogil:
    # offnum is 1-based like PostgreSQL's OffsetNumber
    return rd32(page + PAGE_HEADER_SIZE + (offnum - 1) * ITEM_ID_SIZE)

cdef inline uint32_t make_item_id(uint32_t off, uint32_t flags, uint32_t length) noexcept nogil:
    return (off & 0x7FFF) | ((flags & 3) << 15) | ((length & 0x7FFF) << 17)

cdef inline uint32_t item_off(uint32_t iid) noexcept nogil:
    return iid & 0x7FFF

cdef inline uint32_t item_flags(uint32_t iid) noexcept nogil:
    return (iid >> 15) & 3

cdef inline uint32_t item_len(uint32_t iid) noexcept nogil:
    return iid >> 17

cdef inline int page_header_ok(const uint8_t* page) noexcept nogil:
    cdef uint16_t lower = rd16(page + PD_LOWER), upper = rd16(page + PD_UPPER)
    cdef uint16_t special = rd16(page + PD_SPECIAL)
    if rd16(page + PD_PAGESIZE_VERSION) != (PAGE_SIZE | PAGE_LAYOUT_VERSION):
        return 0
    if lower < PAGE_HEADER_SIZE or lower > upper or upper > special or special > PAGE_SIZE:
        return 0
    if (lower - PAGE_HEADER_SIZE) % ITEM_ID_SIZE:
        return 0
    return 1

cdef inline uint16_t page_free_space(const uint8_t* page) noexcept nogil:
    # room for one more tuple of this many bytes plus its slot (PageGetFreeSpace)
    cdef int space = <int>rd16(page + PD_UPPER) - <int>rd16(page + PD_LOWER) - ITEM_ID_SIZE
    if space < 0:
        return 0
    return <uint16_t>space

# The operations redo and the primary share; each keeps the page consistent or changes nothing.
cdef int page_add_item(uint8_t* page, uint16_t offnum, const uint8_t* data, uint32_t length) noexcept nogil
cdef int page_kill_item(uint8_t* page, uint16_t offnum) noexcept nogil
cdef int page_restore_image(uint8_t* page, const uint8_t* image, uint32_t length,
                            uint32_t hole_offset, uint32_t hole_length) noexcept nogil
cdef uint16_t page_checksum(const uint8_t* page, uint32_t blkno) noexcept nogil
cdef int page_verify(const uint8_t* page, uint32_t blkno) noexcept nogil
