# The C-level XLogRecord decoder (PostgreSQL 15 layout), for other extensions to cimport:
#
#     from logtide._ext.xlogreader cimport XLDecoded, xl_decode, XL_OK
#
# xl_decode never allocates and never touches Python objects, so it runs without the GIL.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

from logtide._ext.xlog_format cimport XLR_MAX_BLOCK_ID

# result codes of xl_decode (0 = ok); xl_error_text() names them
cdef enum:
    XL_OK = 0
    XL_ERR_SHORT_HEADER = -1      # fewer than 24 bytes
    XL_ERR_TOT_LEN = -2           # xl_tot_len < 24, or beyond the buffer
    XL_ERR_CRC = -3               # CRC-32C mismatch
    XL_ERR_RMID = -4              # resource manager id PostgreSQL does not accept
    XL_ERR_BLOCK_ID = -5          # unknown or out-of-order block id
    XL_ERR_BLOCK_HEADER = -6      # block header runs past the header area or is inconsistent
    XL_ERR_IMAGE = -7             # inconsistent image header (hole / length / compression)
    XL_ERR_SAME_REL = -8          # BKPBLOCK_SAME_REL on the first block
    XL_ERR_LENGTHS = -9           # header lengths do not add up to xl_tot_len
    XL_ERR_DATA_FLAGS = -10       # HAS_DATA with length 0, or length without HAS_DATA

cdef struct XLBlockRef:
    uint8_t block_id
    uint8_t fork_flags            # fork in the low 4 bits, BKPBLOCK_* flags in the high 4
    uint8_t has_image
    uint8_t has_data
    uint8_t apply_image
    uint8_t bimg_info
    uint16_t data_len
    uint16_t bimg_len
    uint16_t hole_offset
    uint16_t hole_length
    uint32_t spc
    uint32_t db
    uint32_t rel
    uint32_t fork
    uint32_t block
    uint32_t image_off            # offset of the image bytes in the FULL record
    uint32_t data_off             # offset of the block data in the FULL record

cdef struct XLDecoded:
    uint32_t tot_len
    uint32_t xid
    uint64_t prev
    uint8_t info
    uint8_t rmid
    uint32_t crc
    uint32_t toplevel_xid         # 0 when absent
    uint16_t origin               # 0 when absent
    uint8_t has_origin
    int nblocks
    XLBlockRef blocks[XLR_MAX_BLOCK_ID + 1]
    uint32_t headers_end          # offset where the block/main data starts in the FULL record
    uint32_t main_off             # offset of main data in the decoded buffer (full record or WAL meta)
    uint32_t main_len
    uint32_t blocks_len           # bytes of block data (images + data), absent in WAL meta
    uint32_t size                 # bytes of the decoded buffer: tot_len, or the WAL-meta length

# Decode one record at rec[0:avail]. meta=1 decodes the WAL-meta form (block data removed; the
# CRC, which covers the block data, is then not checked). Returns XL_OK or an XL_ERR_* code.
cdef int xl_decode(const uint8_t* rec, size_t avail, XLDecoded* out, bint verify_crc, bint meta) noexcept nogil

# CRC-32C of a full record as PostgreSQL computes it: the bytes after the header, then the header
# up to xl_crc.
cdef uint32_t xl_record_crc(const uint8_t* rec, uint32_t tot_len) noexcept nogil
