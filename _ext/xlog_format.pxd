# PostgreSQL 15 WAL layout: the constants shared by the WAL reader (logindex/pgwal, _ext) and
# writer (replay/). logtide's own WAL records use exactly this record layout. Full text: docs/xlog_format.md.

cdef enum:
    # WAL pages and segments
    XLOG_BLCKSZ = 8192
    XLOG_PAGE_MAGIC = 0xD110          # PostgreSQL 15
    SIZE_OF_XLOG_SHORT_PHD = 24       # magic u16, info u16, tli u32, pageaddr u64, rem_len u32, pad to 8
    SIZE_OF_XLOG_LONG_PHD = 40        # + sysid u64, seg_size u32, xlog_blcksz u32
    XLP_FIRST_IS_CONTRECORD = 0x0001
    XLP_LONG_HEADER = 0x0002
    XLP_BKP_REMOVABLE = 0x0004
    XLP_FIRST_IS_OVERWRITE_CONTRECORD = 0x0008

    # XLogRecord: tot_len u32, xid u32, prev u64, info u8, rmid u8, pad 2, crc u32
    SIZE_OF_XLOG_RECORD = 24
    XLOG_RECORD_CRC_OFFSET = 20
    XLR_INFO_MASK = 0x0F
    XLR_RMGR_INFO_MASK = 0xF0
    XLR_SPECIAL_REL_UPDATE = 0x01
    XLR_CHECK_CONSISTENCY = 0x02

    # block references
    XLR_MAX_BLOCK_ID = 32
    XLR_BLOCK_ID_DATA_SHORT = 255     # u8 main-data length follows
    XLR_BLOCK_ID_DATA_LONG = 254      # u32 main-data length follows
    XLR_BLOCK_ID_ORIGIN = 253         # u16 replication origin follows
    XLR_BLOCK_ID_TOPLEVEL_XID = 252   # u32 top-level xid follows
    SIZE_OF_BLOCK_HEADER = 4          # id u8, fork_flags u8, data_length u16
    SIZE_OF_IMAGE_HEADER = 5          # length u16, hole_offset u16, bimg_info u8
    SIZE_OF_COMPRESS_HEADER = 2       # hole_length u16 (compressed image with a hole)
    SIZE_OF_RELFILENODE = 12          # spc u32, db u32, rel u32
    BKPBLOCK_FORK_MASK = 0x0F
    BKPBLOCK_FLAG_MASK = 0xF0
    BKPBLOCK_HAS_IMAGE = 0x10
    BKPBLOCK_HAS_DATA = 0x20
    BKPBLOCK_WILL_INIT = 0x40
    BKPBLOCK_SAME_REL = 0x80
    BKPIMAGE_HAS_HOLE = 0x01          # PostgreSQL 15 values
    BKPIMAGE_APPLY = 0x02
    BKPIMAGE_COMPRESS_PGLZ = 0x04
    BKPIMAGE_COMPRESS_LZ4 = 0x08
    BKPIMAGE_COMPRESS_ZSTD = 0x10

    # resource managers (rmid) and the info codes logtide's redo uses
    RM_XLOG_ID = 0
    RM_XACT_ID = 1
    RM_SMGR_ID = 2
    RM_HEAP2_ID = 9
    RM_HEAP_ID = 10
    RM_BTREE_ID = 11
    XLOG_FPI_FOR_HINT = 0xA0
    XLOG_FPI = 0xB0
    XLOG_HEAP_INSERT = 0x00
    XLOG_HEAP_DELETE = 0x10
    XLOG_HEAP_UPDATE = 0x20
    XLOG_HEAP_HOT_UPDATE = 0x40
    XLOG_HEAP_OPMASK = 0x70
    XLOG_HEAP_INIT_PAGE = 0x80

    # data pages
    BLCKSZ = 8192

    # added for the WAL segment reader (logindex/pgwal, _ext/xlogreader)
    DEFAULT_XLOG_SEG_SIZE = 16777216  # 16 MiB, initdb's default --wal-segsize
    XLP_ALL_FLAGS = 0x000F
    XLOG_SWITCH = 0x40                # RM_XLOG info: the rest of the segment is unused
    RM_MAX_BUILTIN_ID = 21            # PostgreSQL 15: RM_LOGICALMSG_ID
    RM_MIN_CUSTOM_ID = 128            # custom resource managers take 128..255
    MAX_FORKNUM = 3                   # main, fsm, vm, init
