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


@dataclass
class Entry:
    """One logtail entry of one table: a batch of inserts or deletes, or object metadata."""
    kind: str
    ts: int
    batch: pa.Table | None = None
    meta: dict | None = None      # META: {"cleanup_ts", "objects": [{"name", "kind", "blocks", "create_ts"}]}

    @property
    def rows(self) -> int:
        return 0 if self.batch is None else self.batch.num_rows


@dataclass
class Record:
    kind: int
    ts: int
    info: dict = field(default_factory=dict)
    batches: list = field(default_factory=list)   # [(table, kind, pa.Table)]


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


def encode(rec: Record) -> bytes:
    blobs = [ipc_bytes(t) for _, _, t in rec.batches]
    info = dict(rec.info)
    info["batches"] = [{"table": tb, "kind": k, "size": len(b)} for (tb, k, _), b in zip(rec.batches, blobs)]
    js = _JSON.encode(info).encode()
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
