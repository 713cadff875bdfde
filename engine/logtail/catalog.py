"""The catalog: tables with typed columns (numpy dtypes) and an int64 primary key."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from logtide.errors import SchemaError

SUPPORTED_KINDS = "biuf"   # bool, signed and unsigned ints, floats


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
        """The rows as one numpy array per column, all the same length; SchemaError when they do not fit."""
        if not isinstance(rows, dict):
            raise SchemaError(f"rows of {self.name!r} are a dict of column -> values, got {type(rows).__name__}")
        want = self._dtypes
        if rows.keys() != want.keys():
            raise SchemaError(f"{self.name!r} has columns {sorted(want)}, got {sorted(rows)}")
        out, n = {}, None
        for c, d in want.items():
            a = np.asarray(rows[c])
            if a.ndim == 0:
                a = a.reshape(1)
            if a.ndim != 1:
                raise SchemaError(f"column {c!r} must be one-dimensional")
            if a.dtype == d:          # the common case: nothing to check or convert
                if n is not None and len(a) != n:
                    raise SchemaError(f"columns of {self.name!r} differ in length")
                n = len(a)
                out[c] = a
                continue
            ok = (a.dtype == d or (a.dtype.kind in "iub" and d.kind in "iuf" and np.can_cast(a.dtype, d))
                  or (a.dtype.kind == "f" and d.kind == "f") or (a.size == 0 and a.dtype.kind in "f"))
            if a.dtype.kind in "iu" and d.kind in "iu" and not np.can_cast(a.dtype, d):
                # plain Python ints arrive as int64: accept when every value fits
                info = np.iinfo(d)
                ok = a.size == 0 or (a.min() >= info.min and a.max() <= info.max)
            if not ok:
                raise SchemaError(f"column {c!r} of {self.name!r} is {d}, got values of type {a.dtype}")
            a = a.astype(d, copy=False)
            if n is not None and len(a) != n:
                raise SchemaError(f"columns of {self.name!r} differ in length")
            n = len(a)
            out[c] = a
        return out
