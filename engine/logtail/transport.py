"""The push stream between one CN and the TN, in-process: two queues and a cut switch.

CN -> TN frames are bytes (JSON: {"op": "subscribe" | "unsubscribe", "table": name}), checked like
frames off a wire; TN -> CN messages are tuples carrying Arrow batches.
"""
from __future__ import annotations

import json
import queue
import threading

from logtide.errors import MalformedMessageError, StreamClosedError

OPS = ("subscribe", "unsubscribe")
_CLOSED = object()


def encode_request(op: str, table: str) -> bytes:
    return json.dumps({"op": op, "table": table}).encode()


def decode_request(frame) -> dict:
    if not isinstance(frame, (bytes, bytearray)):
        raise MalformedMessageError(f"a stream frame is bytes, got {type(frame).__name__}")
    try:
        req = json.loads(frame)
    except ValueError as exc:
        raise MalformedMessageError(f"undecodable stream frame: {exc}") from exc
    if not isinstance(req, dict) or req.get("op") not in OPS or not isinstance(req.get("table"), str):
        raise MalformedMessageError(f"a stream frame needs op in {OPS} and a table name, got {req!r}")
    return req


class LocalStream:
    """One CN's stream. cut() breaks it from either side, as a lost connection would."""

    def __init__(self, cn_name: str) -> None:
        self.cn_name = cn_name
        self.subscribed: set[str] = set()     # TN side: tables this CN gets
        self._to_tn: queue.Queue = queue.Queue()
        self._to_cn: queue.Queue = queue.Queue()
        self.closed = False

    def send_to_tn(self, frame) -> None:
        if self.closed:
            raise StreamClosedError("stream is closed")
        self._to_tn.put(frame)

    def send_to_cn(self, msg) -> None:
        if self.closed:
            raise StreamClosedError("stream is closed")
        self._to_cn.put(msg)

    def tn_recv(self):
        m = self._to_tn.get()
        if m is _CLOSED:
            raise StreamClosedError("stream is closed")
        return m

    def cn_recv(self, timeout: float | None = None):
        try:
            m = self._to_cn.get(timeout=timeout)
        except queue.Empty:
            return None
        if m is _CLOSED:
            raise StreamClosedError("stream is closed")
        return m

    def cut(self) -> None:
        """Break the stream: both ends see it closed; messages in flight are lost."""
        self.closed = True
        for q in (self._to_tn, self._to_cn):
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
            q.put(_CLOSED)

    close = cut


# ---------------------------------------------------------------------- the wire form of TN -> CN messages
# payload = "<4sI" (magic b"LTS1", JSON length) + JSON + Arrow IPC batches back to back.
# JSON: {"type": subscribed|pulled|update|unsubscribed|error, ...,
#        "entries": [{"table", "kind", "ts", "size" (batch bytes, 0 for meta), "meta"}]}

import struct  # noqa: E402

MSG_MAGIC = b"LTS1"
MSG_HEADER = struct.Struct("<4sI")


def encode_message(msg) -> bytes:
    kind = msg[0]
    blobs, entries = [], []

    def add(table, es):
        for e in es:
            b = e.ipc()
            blobs.append(b)
            entries.append({"table": table, "kind": e.kind, "ts": e.ts, "size": len(b), "meta": e.meta})
    if kind in ("subscribed", "pulled"):
        resp = dict(msg[1])
        add(resp["table"], resp.pop("entries"))
        info = {"type": kind, "resp": resp}
    elif kind == "update":
        _, from_ts, to_ts, tables = msg
        for t, es in tables.items():
            add(t, es)
        info = {"type": kind, "from_ts": from_ts, "to_ts": to_ts, "tables": sorted(tables)}
    elif kind == "unsubscribed":
        info = {"type": kind, "table": msg[1]}
    elif kind == "error":
        info = {"type": kind, "code": msg[1], "message": msg[2]}
    else:
        raise MalformedMessageError(f"unknown stream message {kind!r}")
    info["entries"] = entries
    js = json.dumps(info, separators=(",", ":")).encode()
    return b"".join([MSG_HEADER.pack(MSG_MAGIC, len(js)), js, *blobs])


def decode_message(payload: bytes):
    from logtide.engine.logtail.logtail_format import Entry, ipc_table
    mv = memoryview(payload)
    if len(mv) < MSG_HEADER.size:
        raise MalformedMessageError("stream message shorter than its header")
    magic, jlen = MSG_HEADER.unpack_from(mv, 0)
    if magic != MSG_MAGIC:
        raise MalformedMessageError(f"not a logtail stream message (magic {magic!r})")
    pos = MSG_HEADER.size + jlen
    try:
        info = json.loads(bytes(mv[MSG_HEADER.size:pos]))
    except ValueError as exc:
        raise MalformedMessageError(f"bad stream message header: {exc}") from exc
    per_table: dict = {}
    for e in info["entries"]:
        size = e["size"]
        if pos + size > len(mv):
            raise MalformedMessageError("stream message is truncated")
        batch = ipc_table(mv[pos:pos + size]) if size else None
        pos += size
        per_table.setdefault(e["table"], []).append(Entry(e["kind"], e["ts"], batch, e["meta"]))
    kind = info["type"]
    if kind in ("subscribed", "pulled"):
        resp = info["resp"]
        resp["entries"] = per_table.get(resp["table"], [])
        return (kind, resp)
    if kind == "update":
        return ("update", info["from_ts"], info["to_ts"], {t: per_table.get(t, []) for t in info["tables"]})
    if kind == "unsubscribed":
        return ("unsubscribed", info["table"])
    return ("error", info["code"], info["message"])


class RemoteStream:
    """A CN's push stream to a TN in another process (the bidirectional call Logtail.Push, on the
    framed carrier); same interface as LocalStream."""

    def __init__(self, address: str, cn_name: str = "cn", **options) -> None:
        from logtide.engine.logtail import logtail_pb2 as pb
        from logtide.engine.logtail.service import LOGTAIL
        from logtide.engine.rpc import connect
        self.cn_name = cn_name
        self.closed = False
        self._req: queue.Queue = queue.Queue()
        self._resp: queue.Queue = queue.Queue()
        self._client = connect(LOGTAIL, address, carrier="wire", **options)

        def requests():
            while True:
                f = self._req.get()
                if f is _CLOSED:
                    return
                yield pb.StreamRequest(frame=f)
        self._call = self._client.Push(requests())

        def pump():
            try:
                for m in self._call:
                    try:
                        self._resp.put(decode_message(m.payload))
                    except MalformedMessageError as exc:
                        self._resp.put(("error", "MalformedMessageError", str(exc)))
            except Exception:      # the call ended: cancelled, server gone, network cut
                pass
            finally:
                self.closed = True
                self._resp.put(_CLOSED)
        self._pump = threading.Thread(target=pump, name=f"logtail-remote-{cn_name}", daemon=True)
        self._pump.start()

    def send_to_tn(self, frame) -> None:
        if self.closed:
            raise StreamClosedError("stream is closed")
        if not isinstance(frame, (bytes, bytearray)):
            raise MalformedMessageError(f"a stream frame is bytes, got {type(frame).__name__}")
        self._req.put(bytes(frame))

    def cn_recv(self, timeout: float | None = None):
        try:
            m = self._resp.get(timeout=timeout)
        except queue.Empty:
            return None
        if m is _CLOSED:
            self._resp.put(_CLOSED)
            raise StreamClosedError("stream is closed")
        return m

    def cut(self) -> None:
        self.closed = True
        self._req.put(_CLOSED)
        try:
            self._call.cancel()
        except Exception:
            pass
        self._resp.put(_CLOSED)
        self._client.close()
        # the pump may be decoding in pyarrow with the GIL released: a process that exits meanwhile
        # aborts in the interpreter's finalization, so see it end (a decode is bounded; so is the wait)
        if threading.current_thread() is not self._pump:
            self._pump.join(timeout=10)

    close = cut
