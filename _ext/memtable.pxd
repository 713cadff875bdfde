# One LogIndex memtable with PolarDB's fixed arrays. Layout and serialisation: docs/logindex_format.md.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    MT_SEGMENTS = 4096        # segment id 0 means none: 4095 are usable
    MT_SEG_BYTES = 48
    MT_HASH_SLOTS = 2048
    MT_HEAD_LSNS = 2          # suffix LSNs in an item head
    MT_SEG_LSNS = 10          # suffix LSNs in an item segment
    MT_ORDER_CAP = 40960      # index-order entries: 4096 segments x 10 slots
    MT_SEG_ID_BITS = 12       # an index-order entry: slot << 12 | segment id
    MT_SEG_ID_MASK = 0x0FFF

    # item head (48 bytes)
    HEAD_TAG = 0              # 5 x u32 PageTag
    HEAD_SUFFIX = 20          # 2 x u32
    HEAD_NEXT_ITEM = 28       # u16: next head in the hash chain
    HEAD_NEXT_SEG = 30        # u16: first item segment
    HEAD_TAIL_SEG = 32        # u16: last item segment (0: the head is the tail)
    # item segment (48 bytes)
    SEG_SUFFIX = 0            # 10 x u32
    SEG_PREV = 40             # u16
    SEG_NEXT = 42             # u16
    SEG_HEAD = 44             # u16: the item head this segment belongs to
    # both
    ITEM_NUMBER = 46          # u8: suffix LSNs used
    ITEM_KIND = 47            # u8: 1 head, 2 segment
    KIND_HEAD = 1
    KIND_SEG = 2

    MT_IMAGE_HEADER = 44      # the serialised image's header (memtable.pyx _HDR)

    # insert results
    MT_INSERTED = 0
    MT_FULL = 1
    MT_PREFIX_CHANGE = 2
    MT_DUPLICATE = 3
    MT_LSN_ORDER = -1

cdef struct MemtableData:
    uint64_t table_id
    uint64_t min_lsn
    uint64_t max_lsn
    uint32_t prefix           # upper 32 bits of every LSN in the memtable
    uint32_t n_order          # entries in order[] (= LSN entries stored)
    uint16_t used_segs        # segments 1..used_segs are taken
    uint16_t seg_limit        # usable segments (4095 unless configured smaller)
    uint8_t pad[4]
    uint16_t hash[MT_HASH_SLOTS]
    uint8_t segs[MT_SEGMENTS * MT_SEG_BYTES]
    uint16_t order[MT_ORDER_CAP]

cdef class Memtable:
    cdef MemtableData* d
    cdef int insert_raw(self, const uint32_t* tag, uint32_t slot, uint64_t lsn) noexcept nogil
    cdef uint16_t find_head(self, const uint32_t* tag, uint32_t slot) noexcept nogil
    # rows i..n-1 of C-contiguous (tags[n][5], lsns[n]) until one is neither inserted nor a
    # duplicate; returns the next row, its status in rc (MT_INSERTED when all were consumed)
    cdef Py_ssize_t insert_rows(self, const uint32_t* tags, const uint64_t* lsns, Py_ssize_t i,
                                Py_ssize_t n, int* rc) noexcept nogil
    # LSNs of the item at head within [lo, hi], written to out (None: only counted); returns how many
    cdef Py_ssize_t lookup_raw(self, uint16_t head, uint64_t lo, uint64_t hi, uint64_t* out) noexcept nogil
    # the same, writing at most cap LSNs (the return value still counts them all)
    cdef Py_ssize_t lookup_cap(self, uint16_t head, uint64_t lo, uint64_t hi, uint64_t* out,
                               Py_ssize_t cap) noexcept nogil
    # entry k of the index order: its LSN and a pointer to its 20-byte tag
    cdef void _entry(self, uint32_t k, uint64_t* lsn, const uint8_t** tag) noexcept nogil
    cdef uint32_t _order_start(self, uint64_t from_lsn) noexcept nogil
    cdef bint _valid(self) noexcept

# the hash slot of a PageTag (murmur3 x64-128 of its 20 bytes, low bits of h1)
cdef uint32_t tag_slot(const uint32_t* tag) noexcept nogil

# the five u32 fields of a PageTag given as a 5-tuple, list or array (TypeError / OverflowError otherwise)
cdef int tag_fields(object tag, uint32_t* out) except -1

# The serialised image of a memtable (to_bytes): its size, and the image laid out at p, CRC
# included; for writers that run without the GIL (the LogIndex table writer).
cdef Py_ssize_t image_size(const MemtableData* d) noexcept nogil
cdef void write_image(const MemtableData* d, uint8_t* p) noexcept nogil
