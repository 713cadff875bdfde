"""Checked addresses of rows and pages in the replication primary's relations."""
from __future__ import annotations

import operator

import numpy as np

from logtide.errors import InvalidArgument

SPC, DB = 1663, 5  # the tablespace and database every relation of the primary lives in


def rel_tag(rel: int, block: int) -> tuple:
    """The PageTag of `block` of relation `rel` (main fork)."""
    return (SPC, DB, rel, 0, block)


def check_rel(rel) -> None:
    """InvalidArgument unless `rel` is a u32 int."""
    if not isinstance(rel, int) or isinstance(rel, bool) or not 0 <= rel <= 0xFFFFFFFF:
        raise InvalidArgument(f"rel must be a u32 int, got {rel!r}")


def _int_fields(seq, n: int) -> tuple | None:
    """A tuple or list of `n` integers as a tuple of ints, or None. An integer is what
    operator.index takes, bools excepted (as for `rel`): a float, str or bytes would otherwise
    turn into the address of another row or page."""
    if not isinstance(seq, (tuple, list)) or len(seq) != n:
        return None
    if all(type(v) is int for v in seq):   # the usual case, kept cheap: a PageTag holds exact ints
        return tuple(seq)
    out = []
    for v in seq:
        if isinstance(v, (bool, np.bool_)):
            return None
        try:
            out.append(operator.index(v))
        except TypeError:
            return None
    return tuple(out)


def check_page_tag(tag) -> tuple:
    """A PageTag as five ints, or InvalidArgument. A PageTag is taken as a PageTag, a tuple or
    list of five integers, or a numpy row of five integers; never as a str or bytes."""
    if isinstance(tag, np.ndarray):
        t = tuple(tag.tolist()) if tag.shape == (5,) and tag.dtype.kind in "ui" else None
    else:
        t = _int_fields(tag, 5)
    if t is None or not all(0 <= v <= 0xFFFFFFFF for v in t):
        raise InvalidArgument(f"a PageTag is five u32 integers, got {tag!r}")
    return t


def check_tid(t) -> tuple[int, int]:
    """A tuple id (block, slot) as two ints, or InvalidArgument. A tid is a tuple or list of two
    integers."""
    tid = _int_fields(t, 2)
    if tid is None:
        raise InvalidArgument(f"a tid is (block, slot), two integers, got {t!r}")
    block, off = tid
    if not 0 <= block <= 0xFFFFFFFF or not 1 <= off <= 0xFFFF:
        raise InvalidArgument(f"a tid is (block u32, slot 1..65535), got {t!r}")
    return block, off
