"""Where pg_waldump says a WAL ends, from the error it stops with.

pg_waldump reads until a record does not decode. Within a page that is "invalid record length at
X/Y" (Y where the next record would start); when the last record ends on a page boundary, the next
page is unwritten and the error is its page header's: "invalid magic number 0000 in log segment
S, offset O" (PostgreSQL 15), and the WAL ends where that page begins.
"""
from __future__ import annotations

import re

_IN_PAGE = re.compile(r"invalid record length at ([0-9A-F]+)/([0-9A-F]+)")
_AT_PAGE = re.compile(r"invalid magic number 0000 in (?:WAL|log) segment ([0-9A-F]{24}),"
                      r"(?: LSN [0-9A-F]+/[0-9A-F]+,)? offset (\d+)")


def waldump_end_lsn(err: str, seg_size: int) -> int | None:
    """The LSN at which pg_waldump's stderr `err` says the WAL ends, or None if it stopped for
    another reason."""
    m = _IN_PAGE.search(err)
    if m:
        return (int(m.group(1), 16) << 32) | int(m.group(2), 16)
    m = _AT_PAGE.search(err)
    if m:
        name = m.group(1)
        segno = int(name[8:16], 16) * (0x100000000 // seg_size) + int(name[16:24], 16)
        return segno * seg_size + int(m.group(2))
    return None
