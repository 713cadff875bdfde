"""LoopStream: the server's end of a bidi stream whose servicer runs on the event loop.

A servicer may serve a bidi method `M` with `open_M(context, reply)`, returning a handler with
`on_request(request)` and `on_end()` (and optionally `on_error(exc)` for a request that does not
parse). The handler runs on the loop, for each request as its frame is read, and answers with
`reply(response)`; it must never wait. A stream that answers a little per request (Raft's
acknowledgements) then costs no thread and no wake-up: with a thread per stream, every received
batch is two context switches more.

Credit: requests are taken as they arrive, so credit goes back at once; replies beyond the client's
credit wait here, in order, until it grants more.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Any

from logtide._ext import wire_codec as wc
from logtide.engine.rpc.error_mapping import failure_status
from logtide.engine.rpc.service import CallContext, MethodDef
from logtide.engine.rpc.stream_reply import stream_reply
from logtide.errors import InvalidRequest

log = logging.getLogger("logtide.rpc")


class LoopStream:
    """One stream served on the loop; `conn` is the server connection (write, peer_limit, ended)."""

    def __init__(self, conn: Any, sid: int, method: MethodDef, opener, window: int) -> None:
        self.conn, self.sid, self.method = conn, sid, method
        self.ctx = CallContext(conn.peer, peer_uris=conn.ctx.peer_uris)
        self.window = window                   # the carrier's stream window (credit per stream)
        self.credit = window
        self.taken = 0
        self.held: deque[bytes] = deque()      # replies waiting for credit
        self.over = False
        self._parse = method.request_type.FromString
        self.handler = opener(self.ctx, self.reply)

    def reply(self, response: Any) -> None:
        """Send one response (on the loop)."""
        if self.over:
            return
        frame = wc.encode_msg(self.sid, stream_reply(self.method, response, self.conn.peer_limit))
        if self.credit > 0 and not self.held:
            self.credit -= 1
            self.conn.write(frame)
        else:
            self.held.append(frame)

    # frames of the stream, on the loop
    def on_msg(self, data: bytes) -> None:
        if self.over:
            return
        self.taken += 1
        if self.taken >= self.window // 2:
            self.conn.write(wc.encode_credit(self.sid, self.taken))
            self.taken = 0
        try:
            req = self._parse(data)
        except Exception as exc:  # noqa: BLE001 - the caller's bad bytes
            err = InvalidRequest(f"{self.method.path}: malformed {self.method.request_type.__name__}: {exc}")
            on_error = getattr(self.handler, "on_error", None)
            if on_error is not None:
                on_error(err)
            self.finish(err)
            return
        try:
            self.handler.on_request(req)
        except Exception as exc:  # noqa: BLE001 - the stream's status
            self.finish(exc)

    def on_end(self) -> None:
        if self.over:
            return
        try:
            self.handler.on_end()
        except Exception as exc:  # noqa: BLE001 - the stream's status
            self.finish(exc)
            return
        self.finish(None)

    def on_credit(self, n: int) -> None:
        self.credit += n
        while self.held and self.credit > 0:
            self.credit -= 1
            self.conn.write(self.held.popleft())

    def cancel(self) -> None:
        """The client cancelled, or the connection is gone: no status goes out."""
        if not self.over:
            self.over = True
            self.ctx.cancel()
            try:
                self.handler.on_end()
            except Exception:  # noqa: BLE001 - nobody is left to tell
                log.exception("rpc: %s: a stream handler failed at cancel", self.method.path)
            self.conn.stream_ended(self.sid, self)

    def finish(self, exc: BaseException | None) -> None:
        """End the stream with OK, or with the status of `exc`."""
        if self.over:
            return
        self.over = True
        self.ctx.cancel()
        code, etype, details = (0, "", "") if exc is None else failure_status(exc, self.method.path)
        for frame in self.held:       # held replies go before the status (the client reads them first)
            self.conn.write(frame)
        self.held.clear()
        self.conn.write(wc.encode_end(self.sid, code, etype, details))
        self.conn.stream_ended(self.sid, self)
