# Redo of logtide's resource managers (heap insert/update/delete, full-page image) over 8 KiB pages.
# Records are PostgreSQL 15 XLogRecords (xlog_format.pxd); redo_decode is the nogil walk redo needs
# to find a page's block data, a full-page image and the main data inside one record.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    REDO_APPLIED = 1
    REDO_SKIPPED = 0                  # record LSN <= page LSN: already on the page
    REDO_BAD_RECORD = -10             # lengths do not add up, bad block id, SAME_REL without a previous block
    REDO_BAD_CRC = -11
    REDO_NOT_IN_RECORD = -12          # the record references no block with this PageTag
    REDO_UNSUPPORTED = -13            # resource manager / info / compressed image redo does not handle
    REDO_PAGE_MISSING = -14           # the record needs an initialized page and got a new (zero) one
    REDO_BAD_MAIN_DATA = -15          # main data too short for the record type
    REDO_PAGE_OP = -16                # the page operation failed (see page.pxd codes: slot, space)

cdef struct BlockRef:
    uint32_t spc
    uint32_t db
    uint32_t rel
    uint32_t blkno
    uint8_t fork
    uint8_t flags                     # BKPBLOCK_* flag bits (upper nibble of fork_flags)
    uint8_t in_use
    uint8_t bimg_info
    uint16_t data_len
    uint16_t bimg_len
    uint16_t hole_offset
    uint16_t hole_length
    const uint8_t* data               # NULL in WAL meta (no block data there)
    const uint8_t* image

cdef struct DecodedRecord:
    uint32_t tot_len
    uint32_t xid
    uint64_t prev
    uint8_t info
    uint8_t rmid
    uint32_t crc
    int max_block_id                  # -1 when the record references no block
    BlockRef blocks[33]               # XLR_MAX_BLOCK_ID + 1
    const uint8_t* main_data
    uint32_t main_len
    uint32_t headers_len              # bytes of header + block headers + main-data header

# meta=True parses WAL meta (header + block headers + main data, no block data); meta never carries
# the block data the CRC covers, so only full records are CRC-checked. check_crc=False skips the
# record's CRC where the caller checked this record's CRC already (the located redo meets a record
# once per page it touches, and checks it at the first: see apply_located).
cdef int redo_decode(const uint8_t* rec, size_t length, DecodedRecord* out, bint meta,
                     bint check_crc) noexcept nogil
cdef int redo_find_block(const DecodedRecord* r, uint32_t spc, uint32_t db, uint32_t rel,
                         uint32_t fork, uint32_t blkno) noexcept nogil
cdef int redo_block(uint8_t* page, const DecodedRecord* r, int block_id, uint64_t lsn) noexcept nogil
