"""A batch of logtail rows as numpy columns, with its Arrow IPC bytes made without pyarrow per call.

A commit of a few rows spends most of its CPU turning numpy columns into a `pa.Table` (tens of µs)
and serializing it. For columns of fixed-width numbers without nulls, the Arrow IPC record batch
message depends only on the schema and the row count: the metadata (a flatbuffer naming the row
count and the buffers' offsets and lengths) is the same for every batch of that shape, and the body
is each column's bytes padded to 8. A `BatchLayout` makes the metadata once per row count (by
serializing a batch of zeros with pyarrow, and checking that the body it wrote is the one it would
build itself), then writes any batch of that shape by concatenation: byte for byte what pyarrow's
stream writer writes (tests/test_logtail_column_batch.py checks it against pyarrow).

The `pa.Table` is built only when someone reads it (a pull, a CN, a flush), and a push merges the
batches of many commits with numpy before that.
"""
from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

_ALIGN = 8                 # Arrow IPC pads every body buffer to 8 bytes
_MAX_CACHED_ROWS = 256     # metadata is cached per row count up to this; larger batches use pyarrow
_PAD = b"\0" * _ALIGN


class BatchLayout:
    """The column names and numpy dtypes of a kind of batch (one table's inserts, or deletes), with
    its Arrow schema, its IPC schema message and, per row count, its record batch metadata."""

    def __init__(self, columns: list[tuple[str, np.dtype]]) -> None:
        self.names = [c for c, _ in columns]
        self.dtypes = [np.dtype(d) for _, d in columns]
        self.schema = pa.schema([(c, pa.from_numpy_dtype(d)) for c, d in zip(self.names, self.dtypes)])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema):
            pass
        empty = sink.getvalue().to_pybytes()
        self.head, self.eos = empty[:-8], empty[-8:]     # schema message, end-of-stream marker
        # bool is bit-packed in Arrow and byte-swapped dtypes are converted: those go through pyarrow
        self.direct = all(d.kind in "iuf" and d.isnative for d in self.dtypes)
        self._meta: dict[int, bytes | None] = {}
        self._lock = threading.Lock()

    def _metadata(self, n: int) -> bytes | None:
        """The record batch message before its body, for n rows; None when pyarrow writes it differently."""
        m = self._meta.get(n, False)
        if m is not False:
            return m
        zeros = [np.zeros(n, dtype=d) for d in self.dtypes]
        ser = pa.RecordBatch.from_arrays([pa.array(z) for z in zeros], schema=self.schema).serialize().to_pybytes()
        body = _body(zeros)
        m = ser[:len(ser) - len(body)] if ser.endswith(body) else None
        with self._lock:
            self._meta[n] = m
        return m

    def batch_metadata(self, n: int) -> bytes | None:
        """The record batch message before its body, for n > 0 rows; None when only pyarrow can
        write such a batch."""
        if not self.direct or n > _MAX_CACHED_ROWS or n <= 0:
            return None
        return self._metadata(n)

    def ipc(self, arrays: list[np.ndarray], n: int) -> bytes | None:
        """The IPC stream of one batch of n rows, or None when only pyarrow can write it."""
        if n == 0:
            return self.head + self.eos if self.direct else None   # pyarrow writes no batch for an empty table
        meta = self.batch_metadata(n)
        if meta is None:
            return None
        parts = [self.head, meta]
        for a in arrays:
            b = a.tobytes()
            parts.append(b)
            if len(b) % _ALIGN:
                parts.append(_PAD[:_ALIGN - len(b) % _ALIGN])
        parts.append(self.eos)
        return b"".join(parts)


def _body(arrays: list[np.ndarray]) -> bytes:
    out = []
    for a in arrays:
        b = a.tobytes()
        out.append(b)
        out.append(_PAD[:(-len(b)) % _ALIGN])
    return b"".join(out)


class ColumnBatch:
    """Rows as one numpy array per column of `layout`, all of length `num_rows`."""
    __slots__ = ("layout", "arrays", "num_rows", "_table")

    def __init__(self, layout: BatchLayout, arrays: list[np.ndarray]) -> None:
        self.layout = layout
        self.arrays = tuple(arrays)   # a tuple of arrays drops out of the cyclic GC's lists; a list stays
        self.num_rows = len(arrays[0]) if arrays else 0
        self._table: pa.Table | None = None

    def table(self) -> pa.Table:
        """The rows as a pa.Table (built once)."""
        t = self._table
        if t is None:
            t = self._table = pa.Table.from_arrays([pa.array(a) for a in self.arrays], schema=self.layout.schema)
        return t

    def ipc(self) -> bytes:
        """The Arrow IPC stream of the rows, as pyarrow's stream writer writes it."""
        b = self.layout.ipc(self.arrays, self.num_rows)
        if b is None:
            t = self.table()
            b = b"".join([self.layout.head, *(rb.serialize().to_pybytes() for rb in t.to_batches()), self.layout.eos])
        return b

    @staticmethod
    def concat(batches: list["ColumnBatch"]) -> "ColumnBatch":
        """One batch of the rows of `batches` (all of one layout), in order."""
        if len(batches) == 1:
            return batches[0]
        k = len(batches[0].arrays)
        return ColumnBatch(batches[0].layout, [np.concatenate([b.arrays[i] for b in batches]) for i in range(k)])
