"""The on-disk LogIndex format: constants shared by the table writer and reader. See docs/logindex_format.md."""
import struct

from logtide._ext import memtable as _mt

TABLES_PER_FILE = 64           # one table file holds up to 64 tables, one per fixed slot
BLOOM_BLOCK = 4096             # one Bloom4K block per table, in the file's .bloom companion
BLOOM_EXPECTED = 4095          # expected tags per table (a memtable has at most 4095 item heads): k = 6

# A table slot: [magic u32][image length u32][table id u64][memtable image][crc32c u32 of all before]
TABLE_MAGIC = 0x42544C54       # "TLTB"
TABLE_HEADER = struct.Struct("<IIQ")
MAX_IMAGE = _mt.HEADER_SIZE + _mt.HASH_SLOTS * 2 + _mt.USABLE_SEGMENTS * _mt.SEG_BYTES + _mt.ORDER_CAP * 2 + 4
SLOT_SIZE = -(-(TABLE_HEADER.size + MAX_IMAGE + 4) // 4096) * 4096   # page-rounded; unused tails stay sparse

# The meta file, the commit point: written to a temp file, fsynced, renamed over, directory fsynced.
META_NAME = "logindex.meta"
META_MAGIC = 0x464D4C54        # "TLMF"
META_VERSION = 1
# magic, version, flags, max_table_id (-1: none), min_table_id, min_segment, start_lsn, max_lsn,
# tables_per_file, bloom_expected, then crc32c of everything before it
META = struct.Struct("<IHHqQQQQII")
META_CRC = struct.Struct("<I")
META_SIZE = META.size + META_CRC.size


def table_file_name(segment: int) -> str:
    """The table file of segment (table ids segment*64 .. segment*64+63)."""
    return f"{segment:010d}.tbl"


def bloom_file_name(segment: int) -> str:
    return f"{segment:010d}.bloom"


def parse_segment(name: str) -> int | None:
    """Segment number of a table or bloom file name, else None."""
    stem, dot, ext = name.partition(".")
    if ext in ("tbl", "bloom") and len(stem) == 10 and stem.isdigit():
        return int(stem)
    return None
