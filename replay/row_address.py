"""Checked addresses of rows and pages in the replication primary's relations."""
from __future__ import annotations

from logtide.errors import InvalidArgument

SPC, DB = 1663, 5  # the tablespace and database every relation of the primary lives in


def rel_tag(rel: int, block: int) -> tuple:
    """The PageTag of `block` of relation `rel` (main fork)."""
    return (SPC, DB, rel, 0, block)


def check_rel(rel) -> None:
    """InvalidArgument unless `rel` is a u32 int."""
    if not isinstance(rel, int) or isinstance(rel, bool) or not 0 <= rel <= 0xFFFFFFFF:
        raise InvalidArgument(f"rel must be a u32 int, got {rel!r}")


def check_page_tag(tag) -> tuple:
    """A PageTag as five ints, or InvalidArgument."""
    try:
        t = tuple(int(v) for v in tag)
    except (TypeError, ValueError):
        raise InvalidArgument(f"a PageTag is five u32, got {tag!r}") from None
    if len(t) != 5 or not all(0 <= v <= 0xFFFFFFFF for v in t):
        raise InvalidArgument(f"a PageTag is five u32, got {tag!r}")
    return t


def check_tid(t) -> tuple[int, int]:
    """A tuple id (block, slot) as two ints, or InvalidArgument."""
    try:
        block, off = (int(v) for v in t)
    except (TypeError, ValueError):
        raise InvalidArgument(f"a tid is (block, slot), got {t!r}") from None
    if not 0 <= block <= 0xFFFFFFFF or not 1 <= off <= 0xFFFF:
        raise InvalidArgument(f"a tid is (block u32, slot 1..65535), got {t!r}")
    return block, off
