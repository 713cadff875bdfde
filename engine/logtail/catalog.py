"""The catalog: tables with typed columns (numpy dtypes) and an int64 primary key."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import compress, repeat

import numpy as np
import pyarrow as pa

from logtide.errors import SchemaError

SUPPORTED_KINDS = "biuf"   # bool, signed and unsigned ints, floats
_BOOLS = (bool, np.bool_)
_FLOATS = (float, np.floating)


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple      # ((name, numpy dtype str), ...) in order
    pk: str

    @classmethod
    def make(cls, name: str, columns: dict, pk: str) -> "TableDef":
        if not isinstance(name, str) or not name or name.startswith("__"):
            raise SchemaError(f"bad table name {name!r}")
        cols = []
        for c, dt in columns.items():
            if not isinstance(c, str) or not c or c.startswith("__"):
                raise SchemaError(f"bad column name {c!r}")
            try:
                d = np.dtype(dt)
            except TypeError as exc:
                raise SchemaError(f"column {c!r}: {exc}") from exc
            if d.kind not in SUPPORTED_KINDS:
                raise SchemaError(f"column {c!r}: dtype {d} is not a number or bool")
            cols.append((c, d.str))
        if pk not in columns or np.dtype(columns[pk]) != np.int64:
            raise SchemaError(f"primary key {pk!r} must be an int64 column of {name!r}")
        return cls(name, tuple(cols), pk)

    def dtypes(self) -> dict:
        return dict(self._dtypes)

    @cached_property
    def _dtypes(self) -> dict:
        return {c: np.dtype(d) for c, d in self.columns}

    def to_json(self) -> dict:
        return {"name": self.name, "columns": [list(c) for c in self.columns], "pk": self.pk}

    @classmethod
    def from_json(cls, d: dict) -> "TableDef":
        return cls(d["name"], tuple((c, t) for c, t in d["columns"]), d["pk"])

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c, pa.from_numpy_dtype(np.dtype(d))) for c, d in self.columns])

    def coerce(self, rows: dict) -> dict:
        """The rows as one numpy array per column, all the same length; SchemaError when they do not fit.

        The arrays are the result's own: later changes to the caller's arrays do not reach them.
        A value fits its column when the column holds it exactly, except that a float may round to
        the precision of a narrower float column:
        - bool columns take bools only, and only bool columns take bools;
        - integer columns take integers in the column's range (no floats, not even 2.0);
        - float columns take floats (refused when finite and beyond the column's range, where it
          would become inf) and integers the column holds exactly (2**53 + 1 does not fit float64,
          2**24 + 1 does not fit float32).
        Lists and tuples are held to the same rule, value by value: one that mixes bools with
        numbers is refused, and in one that mixes ints with floats each int must fit as an int.
        An empty list fits any column.
        """
        if not isinstance(rows, dict):
            raise SchemaError(f"rows of {self.name!r} are a dict of column -> values, got {type(rows).__name__}")
        want = self._dtypes
        if rows.keys() != want.keys():
            raise SchemaError(f"{self.name!r} has columns {sorted(want)}, got {sorted(rows)}")
        out, n = {}, None
        for c, d in want.items():
            v = rows[c]
            a = np.asarray(v)
            borrowed = a is v or a.base is not None     # it may share memory with the caller's object
            if a.ndim == 0:
                a = a.reshape(1)
            if a.ndim != 1:
                raise SchemaError(f"column {c!r} must be one-dimensional")
            if n is not None and len(a) != n:
                raise SchemaError(f"columns of {self.name!r} differ in length")
            n = len(a)
            if isinstance(v, (list, tuple)) and len(v) > 1:
                self._check_mixed(c, v, a, d)
            if a.dtype == d:          # the common case: nothing to check or convert
                out[c] = a.copy() if borrowed else a
            else:
                out[c] = self._convert(c, a, d)
        return out

    def _check_mixed(self, c: str, v: list | tuple, a: np.ndarray, d: np.dtype) -> None:
        """SchemaError when the list `v` mixes types and numpy, merging them into `a`, changed a value."""
        types = set(map(type, v))
        if len(types) < 2:
            return
        bools = [issubclass(t, _BOOLS) for t in types]
        if any(bools) and not all(bools):      # numpy would make the bools 0 and 1
            raise SchemaError(f"column {c!r} of {self.name!r} is {d}, got bools mixed with numbers")
        if a.dtype.kind == "f":         # numpy made the ints floats, rounding the big ones: check them as ints
            floats = np.fromiter(map(isinstance, v, repeat(_FLOATS)), dtype=bool, count=len(v))
            if not floats.all():
                self._convert(c, np.asarray(list(compress(v, ~floats))), d)

    def _convert(self, c: str, a: np.ndarray, d: np.dtype) -> np.ndarray:
        """`a` (one-dimensional) as a new array of column `c`'s dtype `d`; SchemaError when a value
        does not fit (see coerce)."""
        k = a.dtype.kind
        if a.size == 0 and k == "f":        # [] arrives as float64
            return np.empty(0, dtype=d)
        bad = None
        if (k == "b") != (d.kind == "b") or k not in "biuf" or (k == "f" and d.kind in "iu"):
            raise SchemaError(f"column {c!r} of {self.name!r} is {d}, got values of type {a.dtype}")
        if d.kind in "iu":
            if not np.can_cast(a.dtype, d):
                info = np.iinfo(d)
                lo, hi = a.min(), a.max()
                bad = lo if lo < info.min else hi if hi > info.max else None
            out = None if bad is not None else a.astype(d)
        elif k in "iu":
            out, bad = _ints_as_floats(a, d)
        elif np.can_cast(a.dtype, d):       # a wider float column
            out = a.astype(d)
        else:
            fmax = np.finfo(d).max
            if a.max() <= fmax and a.min() >= -fmax:    # nothing to overflow (False with a nan: look closer)
                out = a.astype(d)
            else:
                with np.errstate(over="ignore"):
                    out = a.astype(d)
                over = np.isinf(out) & np.isfinite(a)
                if over.any():
                    bad = a[over][0]
        if bad is not None:
            raise SchemaError(f"column {c!r} of {self.name!r} is {d}, which does not hold {bad.item()!r}")
        return out


def _ints_as_floats(a: np.ndarray, d: np.dtype) -> tuple:
    """(the integers `a` as float dtype `d`, None) when `d` holds each exactly; else (None, one that it does not)."""
    lim = 1 << (np.finfo(d).nmant + 1)      # every integer up to 2**(mantissa bits) is exact
    if a.min() >= -lim and a.max() <= lim:
        return a.astype(d), None
    with np.errstate(over="ignore"):
        out = a.astype(d)                   # inf where beyond d's range
    b = out.astype(np.float64)
    info = np.iinfo(a.dtype)
    ok = (b >= float(info.min)) & (b < float(info.max) + 1.0)    # converts back without overflow
    ok &= np.where(ok, b, 0).astype(a.dtype) == a
    if ok.all():
        return out, None
    return None, a[~ok][0]
