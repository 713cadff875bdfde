"""PageTag: the address of one page, and the LogIndex key.

A PageTag is five u32 fields (tablespace, database, relation, fork, block). Its bytes are the
five fields as little-endian u32, 20 bytes in all; batch APIs take an (n, 5) uint32 array or
its (n, 20) uint8 view.
"""
from __future__ import annotations

import operator
import struct

import numpy as np

from logtide._ext.pagetag_alloc import adopt_tags, make_tag

_PACK = struct.Struct("<5I")
TAG_BYTES = _PACK.size  # 20
_U32_MAX = 0xFFFFFFFF


class PageTag(tuple):
    """PageTag(spc, db, rel, fork, block): hashable, ordered field by field, equal to the plain
    5-tuple of its fields. It costs what a plain tuple costs: the garbage collector does not walk it."""

    __slots__ = ()
    _fields = ("spc", "db", "rel", "fork", "block")

    def __new__(cls, spc: int, db: int, rel: int, fork: int, block: int) -> "PageTag":
        return make_tag(cls, spc, db, rel, fork, block)

    spc = property(operator.itemgetter(0), doc="tablespace oid")
    db = property(operator.itemgetter(1), doc="database oid")
    rel = property(operator.itemgetter(2), doc="relation file node")
    fork = property(operator.itemgetter(3), doc="fork number (0 = main)")
    block = property(operator.itemgetter(4), doc="block number")

    def to_bytes(self) -> bytes:
        """The 20-byte little-endian form."""
        return _PACK.pack(*self)

    @classmethod
    def from_bytes(cls, data: bytes) -> "PageTag":
        """Parse the 20-byte form from any bytes-like object. TypeError for an object that is not
        bytes-like, ValueError for one that is not 20 bytes long."""
        try:
            view = memoryview(data)
        except TypeError:
            raise TypeError(f"a PageTag's bytes are bytes-like, not {type(data).__name__}") from None
        with view:
            # nbytes, not len(): a view of wider items has fewer items than bytes
            if view.nbytes != TAG_BYTES:
                raise ValueError(f"a PageTag is {TAG_BYTES} bytes, got {view.nbytes}")
            raw = view.tobytes()
        return adopt_tags(cls, (_PACK.unpack(raw),))[0]

    @classmethod
    def parse(cls, text: str) -> "PageTag":
        """Parse 'spc/db/rel/fork/block', each field plain ASCII decimal digits. TypeError for a
        `text` that is not a str, ValueError for any other text."""
        if not isinstance(text, str):
            raise TypeError(f"a PageTag's text is a str, not {type(text).__name__}")
        parts = text.split("/")
        if len(parts) != 5:
            raise ValueError(f"a PageTag is spc/db/rel/fork/block, got {text!r}")
        # int() would also take '1_0', ' 1', '+1' and non-ASCII digits
        if not all(p.isascii() and p.isdigit() for p in parts):
            raise ValueError(f"a PageTag is five decimal integers spc/db/rel/fork/block, got {text!r}")
        try:
            return cls(*(int(p) for p in parts))
        except ValueError:
            raise ValueError(f"a PageTag is five u32 integers spc/db/rel/fork/block, got {text!r}") from None

    def __str__(self) -> str:
        return "/".join(str(v) for v in self)

    def __repr__(self) -> str:
        return "PageTag(spc={}, db={}, rel={}, fork={}, block={})".format(*self)

    def __getnewargs__(self):
        return tuple(self)


def tag_array(tags) -> np.ndarray:
    """Any batch of PageTags as a C-contiguous (n, 5) uint32 array.

    Accepts an (n, 5) integer array, an (n, 20) uint8 array, or an iterable of 5-tuples.
    """
    if isinstance(tags, np.ndarray):
        if tags.ndim == 2 and tags.shape[1] == TAG_BYTES and tags.dtype == np.uint8:
            return np.ascontiguousarray(tags).view("<u4").reshape(len(tags), 5).astype(np.uint32, copy=False)
        if tags.ndim == 2 and tags.shape[1] == 5 and tags.dtype.kind in "ui":
            if tags.dtype != np.uint32:
                if tags.size and (tags.min() < 0 or tags.max() > _U32_MAX):
                    raise ValueError("PageTag fields must fit in u32")
            return np.ascontiguousarray(tags, dtype=np.uint32)
        raise ValueError(f"PageTag arrays are (n, 5) uint32 or (n, 20) uint8, got {tags.shape} {tags.dtype}")
    rows = list(tags)
    if not rows:
        return np.empty((0, 5), dtype=np.uint32)
    # numpy infers the type: a float or str field is refused, not truncated to another page
    try:
        arr = np.array(rows)
    except (ValueError, TypeError) as exc:    # ragged rows
        raise ValueError(f"PageTag rows are five u32 fields each: {exc}") from None
    if arr.dtype.kind == "b":
        arr = arr.astype(np.uint32)           # bools are ints to Python, as in a PageTag's fields
    elif arr.dtype.kind not in "ui":
        _refuse_rows(rows)
    if arr.ndim != 2 or arr.shape[1] != 5:
        raise ValueError(f"PageTag rows are five u32 fields each, got an array of shape {arr.shape}")
    return tag_array(arr)


def _refuse_rows(rows: list) -> None:
    """Why rows that numpy did not read as integers are not PageTags: a TypeError for a field that
    is not an integer, else a ValueError (a row not of five fields, or a field outside u32)."""
    for i, row in enumerate(rows):
        fields = list(row)
        if len(fields) != 5:
            raise ValueError(f"PageTag row {i} has {len(fields)} fields, not 5")
        for x in fields:
            if not hasattr(x, "__index__"):
                raise TypeError(f"PageTag row {i}: fields are integers, not {type(x).__name__}")
    raise ValueError("PageTag fields must fit in u32")


def tag_rows(tags) -> np.ndarray:
    """Any batch of PageTags as its (n, 20) uint8 view."""
    arr = tag_array(tags)
    if arr.dtype.byteorder == ">":
        arr = arr.astype("<u4")
    return arr.view(np.uint8).reshape(len(arr), TAG_BYTES)


def tags_from_array(arr) -> list[PageTag]:
    """An (n, 5) array back to a list of PageTags."""
    return adopt_tags(PageTag, tag_array(arr).tolist())


def random_tags(n: int, seed: int = 0, relations: int = 16, blocks: int = 1 << 20) -> np.ndarray:
    """n generated PageTags in a PostgreSQL-like shape: one tablespace and database, some relations."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 5), dtype=np.uint32)
    out[:, 0] = 1663
    out[:, 1] = 5
    out[:, 2] = 16384 + rng.integers(0, relations, n)
    out[:, 3] = 0
    out[:, 4] = rng.integers(0, blocks, n)
    return out

