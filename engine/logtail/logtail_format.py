"""The bytes of logtail: TN log records and the entries they carry (reader and writer share this file).

A log record payload is
    header  "<4sBQI": magic b"LTL1", kind, ts (u64), length of the JSON part (u32)
    json    {"batches": [{"table", "kind", "size"}...], ...kind-specific fields}
    batches the Arrow IPC streams of the batches, back to back, sizes as listed
Kinds: CREATE_TABLE (json has "table": a table definition), COMMIT (insert and delete batches),
FLUSH (json has "meta": {table: {"cleanup_ts", "objects": [...]}}).

Entry batches (Arrow tables):
    insert  __block int64, __offset int32, __ts int64, then the table's columns
    delete  __block int64, __offset int32, __ts int64, __pk int64
Objects: data objects hold insert batches (one row group per block), tombstone objects delete batches.
See docs/logtail_format.md.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import pyarrow as pa

from logtide.engine.logtail.column_batch import ColumnBatch
from logtide.errors import MalformedMessageError

MAGIC = b"LTL1"
HEADER = struct.Struct("<4sBQI")

CREATE_TABLE = 1
COMMIT = 2
FLUSH = 3
KINDS = (CREATE_TABLE, COMMIT, FLUSH)

INSERT = "insert"
DELETE = "delete"
META = "meta"

BLOCK, OFFSET, TS, PK = "__block", "__offset", "__ts", "__pk"
SYSTEM_COLUMNS = (BLOCK, OFFSET, TS)


class Entry:
    """One logtail entry of one table: a batch of inserts or deletes, or object metadata.

    The batch is a pa.Table, or a ColumnBatch (numpy columns) that becomes a pa.Table when read."""
    __slots__ = ("kind", "ts", "data", "meta")

    def __init__(self, kind: str, ts: int, batch: "pa.Table | ColumnBatch | None" = None,
                 meta: dict | None = None) -> None:
        self.kind = kind
        self.ts = ts
        self.data = batch
        self.meta = meta      # META: {"cleanup_ts", "objects": [{"name", "kind", "blocks", "create_ts"}]}

    @property
    def batch(self) -> pa.Table | None:
        d = self.data
        return d.table() if d.__class__ is ColumnBatch else d

    @property
    def rows(self) -> int:
        return 0 if self.data is None else self.data.num_rows

    def ipc(self) -> bytes:
        """The batch as an Arrow IPC stream (b"" for a META entry)."""
        d = self.data
        if d is None:
            return b""
        return d.ipc() if d.__class__ is ColumnBatch else ipc_bytes(d)

    def __repr__(self) -> str:
        return f"Entry({self.kind!r}, ts={self.ts}, rows={self.rows}, meta={self.meta!r})"


def concat_batches(entries: list[Entry]):
    """The rows of the entries' batches in order: a ColumnBatch when they all are of one layout
    (numpy concatenation, no pa.Table per entry), else a pa.Table."""
    datas = [e.data for e in entries]
    if all(d.__class__ is ColumnBatch for d in datas) and len({id(d.layout) for d in datas}) == 1:
        return ColumnBatch.concat(datas)
    return pa.concat_tables([e.batch for e in entries])


@dataclass
class Record:
    kind: int
    ts: int
    info: dict = field(default_factory=dict)
    batches: list = field(default_factory=list)   # [(table, kind, pa.Table or ColumnBatch)]


_STREAM_ENDS: dict[pa.Schema, tuple[bytes, bytes]] = {}   # schema -> (schema message, end-of-stream marker)


def _stream_ends(schema: pa.Schema) -> tuple[bytes, bytes]:
    ends = _STREAM_ENDS.get(schema)
    if ends is None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema):
            pass
        empty = sink.getvalue().to_pybytes()
        ends = (empty[:-8], empty[-8:])
        if len(_STREAM_ENDS) < 1024:
            _STREAM_ENDS[schema] = ends
    return ends


def ipc_bytes(t: pa.Table) -> bytes:
    """An Arrow IPC stream of `t`: the schema message (made once per schema), each record batch's
    message, the end-of-stream marker; byte for byte what pyarrow's stream writer writes."""
    head, eos = _stream_ends(t.schema)
    return b"".join([head, *(b.serialize().to_pybytes() for b in t.to_batches()), eos])


def ipc_table(b: bytes | memoryview) -> pa.Table:
    try:
        return pa.ipc.open_stream(pa.py_buffer(b)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise MalformedMessageError(f"bad Arrow IPC batch: {exc}") from exc


_JSON = json.JSONEncoder(separators=(",", ":"))   # json.dumps with separators builds one per call


def batch_ipc(b) -> bytes:
    """A pa.Table or ColumnBatch as an Arrow IPC stream."""
    return b.ipc() if b.__class__ is ColumnBatch else ipc_bytes(b)


_NAMES: dict[str, str] = {}   # table name -> its JSON string


def json_name(name: str) -> str:
    """`name` as a JSON string (cached)."""
    j = _NAMES.get(name)
    if j is None:
        j = _JSON.encode(name)
        if len(_NAMES) < 4096:
            _NAMES[name] = j
    return j


def encode(rec: Record) -> bytes:
    blobs = [batch_ipc(t) for _, _, t in rec.batches]
    if rec.info:
        info = dict(rec.info)
        info["batches"] = [{"table": tb, "kind": k, "size": len(b)} for (tb, k, _), b in zip(rec.batches, blobs)]
        js = _JSON.encode(info).encode()
    else:   # a commit: the same bytes as the encoder writes, without building the dicts
        js = ('{"batches":[' + ",".join([f'{{"table":{json_name(tb)},"kind":{json_name(k)},"size":{len(b)}}}'
                                         for (tb, k, _), b in zip(rec.batches, blobs)]) + "]}").encode()
    return b"".join([HEADER.pack(MAGIC, rec.kind, rec.ts, len(js)), js, *blobs])


def decode(payload: bytes) -> Record:
    mv = memoryview(payload)
    if len(mv) < HEADER.size:
        raise MalformedMessageError(f"logtail record of {len(mv)} bytes is shorter than its header")
    magic, kind, ts, jlen = HEADER.unpack_from(mv, 0)
    if magic != MAGIC or kind not in KINDS:
        raise MalformedMessageError(f"not a logtail record (magic {magic!r}, kind {kind})")
    pos = HEADER.size + jlen
    try:
        info = json.loads(bytes(mv[HEADER.size:pos]))
    except ValueError as exc:
        raise MalformedMessageError(f"bad logtail record header: {exc}") from exc
    batches = []
    for b in info.get("batches", []):
        size = int(b["size"])
        if pos + size > len(mv):
            raise MalformedMessageError("logtail record is truncated")
        batches.append((b["table"], b["kind"], ipc_table(mv[pos:pos + size])))
        pos += size
    return Record(kind, ts, info, batches)
