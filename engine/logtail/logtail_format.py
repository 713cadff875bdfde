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


_IPC_OPTIONS = pa.ipc.IpcWriteOptions()   # built once: new_stream would look up its defaults per call


def ipc_bytes(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema, options=_IPC_OPTIONS) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def ipc_table(b: bytes | memoryview) -> pa.Table:
    try:
        return pa.ipc.open_stream(pa.py_buffer(b)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise MalformedMessageError(f"bad Arrow IPC batch: {exc}") from exc


def encode(rec: Record) -> bytes:
    blobs = [ipc_bytes(t) for _, _, t in rec.batches]
    info = dict(rec.info)
    info["batches"] = [{"table": tb, "kind": k, "size": len(b)} for (tb, k, _), b in zip(rec.batches, blobs)]
    js = json.dumps(info, separators=(",", ":")).encode()
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
