"""Page verification against a model that replays the WAL from scratch.

`ScratchModel` reads the WAL from the log once, and rebuilds any page at any LSN N by replaying,
onto an all-zero page, every record up to N that references it. Pages are compared with their
checksums stamped (a page read from storage carries one, a page built in memory need not).
"""
from __future__ import annotations

from collections import defaultdict

from logtide._ext import page as pg
from logtide._ext import redo


def stamped(page: bytes, block: int) -> bytes:
    """The page with its checksum recomputed for `block`."""
    b = bytearray(page)
    pg.set_checksum(b, block)
    return bytes(b)


class ScratchModel:
    """Every page's history, replayed from LSN 1 of the log."""

    def __init__(self, wal, upto: int | None = None):
        self.records: dict[int, bytes] = {}
        self.by_tag: dict[tuple, list[int]] = defaultdict(list)
        self.upto = 0
        self.extend(wal, upto)

    def extend(self, wal, upto: int | None = None) -> None:
        """Read further WAL (up to `upto`, default the log's latest LSN)."""
        upto = wal.latest_lsn() if upto is None else upto
        lsn = self.upto + 1
        while lsn <= upto:
            got = wal.read(lsn, 4 << 20)
            if not got:
                break
            for l, rec in got:
                if l > upto:
                    break
                self.records[l] = rec
                for b in redo.decode(rec)["blocks"]:
                    self.by_tag[tuple(b["tag"])].append(l)
                self.upto = l
            lsn = got[-1][0] + 1

    def page_at(self, tag, lsn: int) -> bytes:
        """The page `tag` as of `lsn` (all-zero when nothing touched it by then)."""
        tag = tuple(int(v) for v in tag)
        if lsn > self.upto:
            raise ValueError(f"the model holds WAL up to {self.upto}, asked for {lsn}")
        page = bytearray(8192)
        for l in self.by_tag.get(tag, ()):
            if l > lsn:
                break
            redo.apply(page, tag, self.records[l], l)
        return bytes(page)

    def same(self, tag, lsn: int, page: bytes) -> bool:
        """True when `page` is byte-identical (checksum stamped) to the model's page at `lsn`."""
        block = int(tag[4])
        return stamped(page, block) == stamped(self.page_at(tag, lsn), block)

    def tags(self) -> list[tuple]:
        return sorted(self.by_tag)
