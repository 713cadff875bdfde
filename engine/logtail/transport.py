"""The push stream between one CN and the TN, in-process: two queues and a cut switch.

CN -> TN frames are bytes (JSON: {"op": "subscribe" | "unsubscribe", "table": name}), checked like
frames off a wire; TN -> CN messages are tuples carrying Arrow batches.
"""
from __future__ import annotations

import json
import queue

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
