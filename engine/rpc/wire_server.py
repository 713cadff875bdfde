"""WireServer: serves services over the framed TCP carrier (docs/rpc.md, "The framed carrier").

Every connection is an asyncio.Protocol on the process's WireLoop (no thread per connection). The
loop splits received bytes into verified frames in C; a CALLS frame's calls are split per method in
C and handed, as one job, to a small worker pool, which runs them like the call pipeline does
(engine/rpc/call_dispatch.py: `frames_<Method>` and `batch_<Method>` hooks, so the log service's
appends of a batch are one group append and one fsync) and writes the batch's replies as one
REPLIES frame. A frame whose calls are all of methods the servicer names in `nonblocking_methods`
runs on the loop itself, without the two thread hand-offs (through `frames_<Method>` hooks, by the
connection's C core, _ext/wire_conn.pyx, with no Python but the hooks); one whose calls all have `defer_<Method>`
(or `defer_frames_<Method>`) hooks is started on the loop and answered when the servicer's `done` comes, from any thread
(engine/rpc/deferred_calls.py), so no thread waits for it. A streaming call runs its servicer in a
thread of its own, as gRPC's server does.

Bounds per connection: calls and request bytes in flight (reading pauses above them), a frame
limit checked before a frame's body is buffered, reading paused while the peer does not read its
replies, and a frame begun and not finished within `frame_timeout` closes the connection. Bad
bytes get a GOAWAY naming the typed error, the connection is closed and the reason logged; the
server keeps serving its other connections.

Given a gRPC backend (DualServer), a connection whose first bytes are HTTP/2's preface is carried
to that gRPC server (GrpcPassthrough): one port serves both carriers.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import weakref
from typing import Any

from logtide._ext import wire_codec as wc
from logtide._ext.wire_conn import REPLY_ROOM, ConnCore
from logtide.engine.rpc import deadlines
from logtide.engine.rpc.address import split_address
from logtide.engine.rpc.call_dispatch import CallDispatcher, Replies, error_reply, packed_replies
from logtide.engine.rpc.deferred_calls import DeferredBatch, FramesCall, Outstanding
from logtide.engine.rpc.error_mapping import failure_status
from logtide.engine.rpc.frame_outbox import FrameOutbox
from logtide.engine.rpc.loop_stream import LoopStream
from logtide.engine.rpc.stream_reply import stream_reply
from logtide.engine.rpc.grpc_passthrough import HTTP2_FIRST_BYTE, GrpcPassthrough
from logtide.engine.rpc.service import CallContext, MethodDef, ServiceDef
from logtide.engine.rpc.tls import TlsOption, certificate_uris
from logtide.engine.rpc.tls import resolve as tls_resolve
from logtide.engine.rpc.transport import DEFAULT_MAX_MESSAGE_SIZE
from logtide.engine.rpc.wire_client import FRAME_SLACK, STREAM_WINDOW
from logtide.engine.rpc.wire_loop import WireLoop
from logtide.errors import (FrameTimeout, InvalidRequest, RpcError, RpcStreamBroken,
                            UnknownWireId, WireProtocolError)

log = logging.getLogger("logtide.rpc.wire")

K = wc.KINDS
K_METHODS, K_CALLS, K_OPEN, K_MSG, K_END, K_CANCEL, K_CREDIT, K_PING, K_PONG, K_GOAWAY = (
    K["METHODS"], K["CALLS"], K["OPEN"], K["MSG"], K["END"], K["CANCEL"], K["CREDIT"], K["PING"], K["PONG"],
    K["GOAWAY"])
# a connection stops reading while it has this many calls, or request bytes, not answered yet
MAX_INFLIGHT_CALLS = 4096
MAX_INFLIGHT_BYTES = 64 << 20
# a frame (or the preface) begun and not finished within this closes the connection
FRAME_TIMEOUT_S = 10.0
# at most this many streams run at once on one server (each holds a thread, as on gRPC's server)
MAX_STREAMS = 256
# how long stop() waits, in all, for the handlers' threads to end
JOIN_S = 5.0
# a deferred call not answered within this gets DeadlineExceededError (its servicer is stuck)
DEFERRED_TIMEOUT_S = 30.0
_ON_WORKER, _ON_LOOP, _DEFERRED = 0, 1, 2     # how a method's calls run (_ServerConn.modes)
_END = object()


class _ServerStream:
    """The server's end of one stream: the servicer's thread, its requests and its credit."""

    def __init__(self, conn: "_ServerConn", sid: int, method: MethodDef, fn) -> None:
        self.conn, self.sid, self.method, self.fn = conn, sid, method, fn
        self.ctx = CallContext(conn.peer, peer_uris=conn.ctx.peer_uris)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.cv = threading.Condition()
        self.credit = STREAM_WINDOW
        self.taken = 0

    # on the loop
    def on_msg(self, data: bytes) -> None:
        self.inbox.put(data)

    def on_end(self) -> None:
        self.inbox.put(_END)

    def on_credit(self, n: int) -> None:
        with self.cv:
            self.credit += n
            self.cv.notify_all()

    def cancel(self) -> None:
        self.ctx.cancel()
        self.inbox.put(_END)
        with self.cv:
            self.cv.notify_all()

    # in the stream's thread
    def _requests(self):
        parse = self.method.request_type.FromString
        while self.ctx.is_active():
            try:
                item = self.inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is _END:
                return
            self.taken += 1
            if self.taken >= STREAM_WINDOW // 2:
                self.conn.send(wc.encode_credit(self.sid, self.taken))
                self.taken = 0
            try:
                yield parse(item)
            except Exception as exc:  # noqa: BLE001 - the caller's bad bytes
                raise InvalidRequest(f"{self.method.path}: malformed {self.method.request_type.__name__}: "
                                     f"{exc}") from None

    def _first(self):
        for r in self._requests():
            return r
        raise InvalidRequest(f"{self.method.path}: the stream ended before its request")

    def _send(self, resp: Any) -> bool:
        data = stream_reply(self.method, resp, self.conn.peer_limit)
        with self.cv:
            while self.credit <= 0 and self.ctx.is_active():
                self.cv.wait(0.5)
            if not self.ctx.is_active():
                return False
            self.credit -= 1
        self.conn.send(wc.encode_msg(self.sid, data))
        return True

    def run(self) -> None:
        code, etype, details = 0, "", ""
        try:
            streaming_in = self.method.client_streaming
            arg = self._requests() if streaming_in else self._first()
            if self.method.server_streaming:
                gen = self.fn(arg, self.ctx)
                try:
                    for resp in gen:
                        if not self._send(resp):
                            break
                finally:
                    close = getattr(gen, "close", None)
                    if close is not None:
                        close()
            else:
                self._send(self.fn(arg, self.ctx))
        except Exception as exc:  # noqa: BLE001 - the stream's status
            code, etype, details = failure_status(exc, self.method.path)
        finally:
            self.conn.stream_done(self.sid)
        if self.ctx.is_active():
            self.conn.send(wc.encode_end(self.sid, code, etype, details))


class _ServerConn(ConnCore, asyncio.Protocol):
    """One client connection, on the WireLoop. Its reads go to ConnCore.data_received
    (_ext/wire_conn.pyx), which answers the calls of on-loop `frames_<Method>` hooks in C and hands
    everything else to the general path here."""

    def __init__(self, server: "WireServer") -> None:
        self.server = server
        self.reader = wc.FrameReader(server.max_frame, preface=True)
        self.tr: asyncio.Transport | None = None
        self.peer = "?"
        self.ctx: CallContext | None = None
        self.peer_limit = 0
        self.paths: list[str] = []
        self.units: list = []
        self.modes: list[int] = []             # per method index: _ON_LOOP, _DEFERRED or _ON_WORKER
        self.hooks = []                        # per method index: its frames hook run on the loop in C, or None
        self.streams: dict[int, _ServerStream] = {}
        self.out = []                          # replies made while a read is handled, written after it
        self.last_sid = 0
        self.inflight_calls = 0
        self.inflight_bytes = 0
        self.read_paused = False
        self.write_paused = False
        self.outbox = FrameOutbox(lambda: server.wl.call_soon(self._flush))   # frames from other threads
        self.closed = False
        self.partial_since = 0.0
        self.sniffing = False
        self.heard = time.monotonic()          # when the sweeper last saw bytes come in
        self.heard_bytes = 0                   # the reader's byte count then
        self.ping_at = 0.0                     # when an unanswered keepalive ping went out (0: none)

    def connection_made(self, transport) -> None:
        self.tr = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        tls = self.server.tls
        # after the handshake: the CA signed this certificate
        uris = certificate_uris(transport.get_extra_info("peercert")) if tls is not None and tls.peer_ids else None
        self.ctx = CallContext(self.peer, peer_uris=uris)
        self.partial_since = time.monotonic()   # the preface is due
        self.server.conns.add(self)
        # with a gRPC backend the first bytes say which carrier the client speaks: answer after them
        self.sniffing = self.server.grpc_backend is not None
        if not self.sniffing:
            transport.write(wc.preface(self.server.max_frame))

    def connection_lost(self, exc) -> None:
        if self.reader.pending and not self.closed:
            try:
                self.reader.finish()
            except WireProtocolError as e:
                log.warning("wire: connection from %s ended: %s", self.peer, e)
        self.closed = True
        self.server.conns.discard(self)
        if self.ctx is not None:
            self.ctx.cancel()
        for s in list(self.streams.values()):
            s.cancel()
        self.streams.clear()

    def eof_received(self) -> bool:
        """The client closed its side: a frame left half sent is answered by a GOAWAY."""
        if self.reader.pending and not self.closed:
            try:
                self.reader.finish()
            except WireProtocolError as exc:
                self.goaway(exc)
        return False

    def _sniffed(self, data: bytes) -> bool:
        """The first bytes, with a gRPC backend: True when they are HTTP/2's (the connection is then
        carried to the gRPC server), else the framed carrier's preface is answered."""
        self.sniffing = False
        if data[:1] == HTTP2_FIRST_BYTE:
            self._to_grpc(data)
            return True
        self.tr.write(wc.preface(self.server.max_frame))
        return False

    def _to_grpc(self, first: bytes) -> None:
        """A gRPC client: from now on its bytes go to the process's gRPC server and back."""
        self.closed = True
        self.partial_since = 0.0
        self.server.conns.discard(self)
        self.tr.set_protocol(GrpcPassthrough(self.tr, first, self.server.grpc_backend, self.peer))

    def _calls(self, groups: list, nbytes: int) -> None:
        """A CALLS frame's calls, split per method: run here, deferred, or on a worker (see the
        module doc); a frame of calls of different kinds goes to a worker."""
        modes = self.modes
        mode = -1
        n = 0
        for m, ids, _ in groups:
            if m >= len(modes):
                raise UnknownWireId(f"CALLS: method index {m} was never bound (the connection bound "
                                    f"{len(modes)})")
            n += len(ids)
            mode = modes[m] if mode == -1 or mode == modes[m] else _ON_WORKER
        if mode == _ON_LOOP:          # nonblocking calls: answered with this read's replies
            try:
                self.out += self.server.run_calls(self, groups)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: that connection cannot go on
                self._batch_failed(exc)
        elif mode == _DEFERRED:
            self._defer(groups, n, nbytes)
        else:
            self.inflight_calls += n
            self.inflight_bytes += nbytes
            self.server.submit(self, groups, n, nbytes)
            if self.inflight_calls > self.server.max_inflight_calls or \
                    self.inflight_bytes > self.server.max_inflight_bytes:
                self._pause()

    def _hooks_done(self, parts: list, fails: list | None) -> None:
        """The end of a batch whose hooks ConnCore ran, when it has failed calls, replies past the
        client's frame limit or a servicer's odd answer: as run_calls ends a batch."""
        try:
            r = Replies()
            for frames in parts:
                r.frames.append(frames)
                r.size += len(frames)
            for m, failed in fails or ():
                path = self.paths[m]
                for call_id, exc in failed:
                    r.error(error_reply(call_id, exc, path))
            self.out += self.server._reply_frames(r, self.peer_limit - REPLY_ROOM)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: that connection cannot go on
            self._batch_failed(exc)

    def _batch_failed(self, exc: Exception) -> None:
        log.error("wire: a batch from %s failed: %s", self.peer, exc, exc_info=exc)
        self.goaway(exc)

    def _frame(self, f: tuple) -> None:
        """A frame other than CALLS."""
        k = f[0]
        if k == K_METHODS:
            if f[1] != len(self.paths):
                raise UnknownWireId(f"METHODS: binds from index {f[1]}, the next free one is {len(self.paths)}")
            for path in f[2]:
                u = self.server.dispatcher.unit(path)
                self.paths.append(path)
                self.units.append(u)
                self.modes.append(_ON_LOOP if path in self.server.on_loop else
                                  _DEFERRED if u is not None and u.deferred else _ON_WORKER)
                self.hooks.append(u.frames if self.modes[-1] == _ON_LOOP and self.server.hooks_in_c else None)
        elif k == K_MSG or k == K_END or k == K_CANCEL or k == K_CREDIT:
            sid = f[1]
            s = self.streams.get(sid)
            if s is None:
                if sid > self.last_sid:
                    raise UnknownWireId(f"stream {sid} was never opened (the last opened is {self.last_sid})")
                return                           # a stream that already ended here
            if k == K_MSG:
                s.on_msg(f[2])
            elif k == K_END:
                s.on_end()
            elif k == K_CREDIT:
                s.on_credit(f[2])
            else:
                s.cancel()
        elif k == K_OPEN:
            self._open(f[1], f[2])
        elif k == K_PING:
            self.tr.write(wc.encode_ping(f[1], pong=True))
        elif k == K_PONG:
            pass
        elif k == K_GOAWAY:
            log.info("wire: %s went away: %s: %s", self.peer, f[2], f[3])
            self.tr.close()
        else:
            raise UnknownWireId(f"a frame of kind {k}, which only a server sends")

    def _open(self, sid: int, m: int) -> None:
        if sid <= self.last_sid:
            raise UnknownWireId(f"OPEN: stream {sid} is not above the last opened ({self.last_sid})")
        if m >= len(self.paths):
            raise UnknownWireId(f"OPEN: method index {m} was never bound")
        self.last_sid = sid
        path = self.paths[m]
        found = self.server.streaming.get(path)
        on_loop = self.server.loop_streams.get(path)
        if on_loop is not None:
            self.streams[sid] = s = LoopStream(self, sid, on_loop[0], on_loop[1], STREAM_WINDOW)
            self.server.running_streams.add(s)
            return
        if found is None:
            why = "a unary method: call it with CALLS" if self.units[m] is not None else "unknown method"
            code, t, d = failure_status(InvalidRequest(f"{path}: {why}"), path)
            self.tr.write(wc.encode_end(sid, code, t, d))
            return
        if len(self.server.running_streams) >= self.server.max_streams:
            code, t, d = failure_status(RpcError(f"{path}: the server runs {self.server.max_streams} streams already"),
                                 path)
            self.tr.write(wc.encode_end(sid, 8, t, d))       # RESOURCE_EXHAUSTED
            return
        s = self.streams[sid] = _ServerStream(self, sid, found[0], found[1])
        self.server.running_streams.add(s)
        t = threading.Thread(target=s.run, name="rpc-wire-stream", daemon=True)
        self.server.stream_threads.add(t)
        t.start()

    def _defer(self, groups: list, calls: int, nbytes: int) -> None:
        """Start a frame of deferred calls; WireServer.answer_deferred writes their replies."""
        srv = self.server
        self.inflight_calls += calls
        self.inflight_bytes += nbytes
        u = self.units[groups[0][0]] if len(groups) == 1 else None
        if u is not None and u.defer_frames is not None:     # the common frame: see deferred_calls
            m, ids, datas = groups[0]
            f = FramesCall(self, ids, self.paths[m], nbytes, srv.deferred_timeout, srv.finished.put)
            srv.deferred.add(f)
            try:
                u.defer_frames(ids, datas, self.ctx, f.done)
            except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                f.done(b"", [(call_id, exc) for call_id in ids])
        else:
            b = DeferredBatch(self, calls, nbytes, srv.deferred_timeout, srv.finished.put)
            srv.deferred.add(b)
            srv.dispatcher.start_deferred(groups, self.units, self.ctx, b)
        if self.inflight_calls > srv.max_inflight_calls or self.inflight_bytes > srv.max_inflight_bytes:
            self._pause()

    def write(self, frame: bytes) -> None:
        """Write a frame (on the loop)."""
        if not self.closed:
            self.tr.write(frame)

    def stream_ended(self, sid: int, s) -> None:   # on the loop
        self.server.running_streams.discard(s)
        self.streams.pop(sid, None)

    def stream_done(self, sid: int) -> None:   # from the stream's thread
        s = self.streams.get(sid)
        self.server.running_streams.discard(s)
        self.server.wl.call_soon(self.streams.pop, sid, None)

    # --- bounds ------------------------------------------------------------------------------------

    def _pause(self) -> None:
        if not self.read_paused and not self.closed:
            self.read_paused = True
            self.tr.pause_reading()

    def _maybe_resume(self) -> None:
        if self.read_paused and not self.write_paused and not self.closed and \
                self.inflight_calls <= self.server.max_inflight_calls and \
                self.inflight_bytes <= self.server.max_inflight_bytes:
            self.read_paused = False
            self.tr.resume_reading()

    def pause_writing(self) -> None:           # the client does not read its replies: stop taking calls
        self.write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._maybe_resume()

    # --- replies -----------------------------------------------------------------------------------

    def answered(self, frames: list[bytes], calls: int, nbytes: int) -> None:   # on the loop
        self.inflight_calls -= calls
        self.inflight_bytes -= nbytes
        if not self.closed:
            self.tr.writelines(frames)
            self._maybe_resume()

    def send(self, frame: bytes) -> None:
        """Write a frame from any thread (frames from one thread keep their order)."""
        self.outbox.put(frame)

    def _flush(self) -> None:
        out = self.outbox.take()
        if not self.closed:
            self.tr.writelines(out)

    def goaway(self, exc: BaseException) -> None:
        """Tell the client why, close the connection and log it (on the loop)."""
        log.warning("wire: closing the connection from %s: %s: %s", self.peer, type(exc).__name__, exc)
        if not self.closed:
            if self.out:        # replies to the frames read before the bad one go first
                self.tr.writelines(self.out)
                self.out = []
            code, t, d = failure_status(exc, "wire")
            self.tr.write(wc.encode_goaway(code, t, d))
            self.tr.close()
        self.closed = True


class WireServer:
    """Serves services over the framed carrier on `address` ("127.0.0.1:0": a free port, see start())."""

    # on-loop `frames_<Method>` hooks are run by the connection's C core (False: by run_calls, the
    # general path, which the tests compare it with)
    hooks_in_c = True

    def __init__(self, address: str = "127.0.0.1:0", *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 workers: int = 8, max_inflight_calls: int = MAX_INFLIGHT_CALLS,
                 max_inflight_bytes: int = MAX_INFLIGHT_BYTES, frame_timeout: float = FRAME_TIMEOUT_S,
                 max_streams: int = MAX_STREAMS, keepalive: float | None = None,
                 keepalive_timeout: float | None = None, tls: TlsOption = None,
                 deferred_timeout: float = DEFERRED_TIMEOUT_S) -> None:
        self.host, self._port = split_address(address, listen=True)
        self.max_message_size = max_message_size
        self.max_frame = max_message_size + FRAME_SLACK
        self.max_inflight_calls, self.max_inflight_bytes = max_inflight_calls, max_inflight_bytes
        self.frame_timeout = frame_timeout
        self.max_streams = max_streams
        self.tls = tls_resolve(tls)
        # a client with calls or streams open that sends nothing for `keepalive` s is pinged; no
        # answer within `keepalive_timeout` closes it (a SIGSTOPped client must not hold its streams)
        self.keepalive = deadlines.KEEPALIVE_S if keepalive is None else keepalive
        self.keepalive_timeout = deadlines.KEEPALIVE_TIMEOUT_S if keepalive_timeout is None else keepalive_timeout
        self.deferred_timeout = deferred_timeout
        self._sweep_every = min(1.0, frame_timeout / 2, self.keepalive / 2, self.keepalive_timeout / 2,
                                deferred_timeout / 4)
        self.dispatcher = CallDispatcher(max_message_size)
        self.streaming: dict[str, tuple[MethodDef, Any]] = {}
        self.loop_streams: dict[str, tuple[MethodDef, Any]] = {}   # bidi methods served on the loop (open_<M>)
        self.on_loop: set[str] = set()         # paths of unary methods that run on the loop
        self.conns: set[_ServerConn] = set()
        self.running_streams: set = set()
        self.stream_threads: weakref.WeakSet = weakref.WeakSet()   # joined by stop()
        self.wl = WireLoop.get()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        # deferred frames started and not answered: the sweeper expires them at their deadline
        self.deferred = Outstanding()
        # deferred batches finished on other threads, answered on the loop (one wake-up per burst)
        self.finished = FrameOutbox(lambda: self.wl.call_soon(self.answer_deferred))
        self._workers = [threading.Thread(target=self._work, name="rpc-wire-worker", daemon=True)
                         for _ in range(workers)]
        self._server: asyncio.AbstractServer | None = None
        self._sweeper = None
        self.port: int | None = None
        self.address: str | None = None
        # the Unix socket of this process's gRPC server: gRPC clients on this port are carried there
        self.grpc_backend: str | None = None

    def add_service(self, service: ServiceDef, servicer: Any) -> "WireServer":
        """Serve every method of `service` by the servicer's method of the same name. The unary
        methods named in the servicer's `nonblocking_methods` (if any) run on the event loop: they
        must return at once and never wait (while one runs, no connection of the process moves)."""
        nonblocking = frozenset(getattr(servicer, "nonblocking_methods", ()))
        for m in service.methods.values():
            fn = getattr(servicer, m.name, None)
            if fn is None:
                raise TypeError(f"{type(servicer).__name__} does not implement {service.name}.{m.name}")
            if m.shape == "unary":
                self.dispatcher.add(m, fn, servicer)
                if m.name in nonblocking:
                    self.on_loop.add(m.path)
            elif m.client_streaming and m.server_streaming and callable(getattr(servicer, "open_" + m.name, None)):
                self.loop_streams[m.path] = (m, getattr(servicer, "open_" + m.name))
            else:
                self.streaming[m.path] = (m, fn)
        return self

    def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        for w in self._workers:
            w.start()
        try:
            self._server = self.wl.run(self._listen(), f"listening on {self.host}:{self._port}")
        except (OSError, OverflowError, ValueError) as exc:
            raise RpcError(f"could not listen on {self.host}:{self._port}: {exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self.address = f"{self.host}:{self.port}"
        log.info("wire server listening on %s", self.address)
        return self.port

    async def _listen(self):
        loop = asyncio.get_running_loop()
        tls = {} if self.tls is None else {"ssl": self.tls.server_context(),
                                           "ssl_handshake_timeout": self.frame_timeout}
        server = await loop.create_server(lambda: _ServerConn(self), self.host, self._port, reuse_address=True,
                                          **tls)
        self._sweeper = loop.call_later(self._sweep_every, self._sweep)
        return server

    def _sweep(self) -> None:
        """Close connections that began a frame (or the preface) and did not finish it in time, or
        did not answer a keepalive ping in time; ping the busy ones that went quiet."""
        now = time.monotonic()
        self.deferred.expire(now)
        for c in list(self.conns):
            if c.closed:
                continue
            if c.reader.bytes_in != c.heard_bytes:   # the client sent something since the last sweep
                c.heard_bytes = c.reader.bytes_in
                c.heard = now
                c.ping_at = 0.0
            if c.partial_since and now - c.partial_since > self.frame_timeout:
                c.goaway(FrameTimeout(f"a frame begun {now - c.partial_since:.1f} s ago is not finished "
                                      f"(frame timeout {self.frame_timeout:g} s)"))
            elif c.ping_at and now - c.ping_at >= self.keepalive_timeout:
                c.goaway(RpcStreamBroken(f"the client did not answer a keepalive ping within "
                                         f"{self.keepalive_timeout:g} s"))
            elif not c.ping_at and (c.streams or c.inflight_calls) and now - c.heard >= self.keepalive:
                c.ping_at = now
                c.tr.write(wc.encode_ping(int(now * 1e6)))
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)

    # --- unary batches -----------------------------------------------------------------------------

    def submit(self, conn: _ServerConn, groups: list, calls: int, nbytes: int) -> None:
        """On the loop: run a CALLS frame's calls on a worker."""
        self._jobs.put((conn, groups, calls, nbytes))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, groups, calls, nbytes = job
            try:
                frames = self.run_calls(conn, groups)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: that connection cannot go on
                log.error("wire: a batch from %s failed: %s", conn.peer, exc, exc_info=exc)
                self.wl.call_soon(conn.goaway, exc)
                continue
            self.wl.call_soon(conn.answered, frames, calls, nbytes)

    def answer_deferred(self) -> None:
        """On the loop: write the replies of the deferred batches finished since the last call."""
        done = self.finished.take()
        for b in done:
            conn = b.conn
            try:
                room = conn.peer_limit - REPLY_ROOM
                if b.__class__ is FramesCall:
                    frames = self._reply_frames(packed_replies(b.frames, b.failed, b.path), room)
                else:
                    frames = self._reply_frames(self.dispatcher.deferred_replies(b, min(self.max_message_size, room)),
                                                room)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: that connection cannot go on
                log.error("wire: a deferred batch from %s failed: %s", conn.peer, exc, exc_info=exc)
                conn.goaway(exc)
                continue
            conn.answered(frames, b.calls, b.nbytes)
        self.deferred.answered(len(done))

    def run_calls(self, conn: _ServerConn, groups: list) -> list[bytes]:
        """The REPLIES frames answering one CALLS frame (more than one only past the client's limit)."""
        room = conn.peer_limit - REPLY_ROOM
        r: Replies = self.dispatcher.run_groups(groups, conn.paths, min(self.max_message_size, room),
                                                conn.ctx, conn.units)
        return self._reply_frames(r, room)

    @staticmethod
    def _reply_frames(r: Replies, room: int) -> list[bytes]:
        if r.size <= room and not r.errors:
            return [wc.encode_replies(r.frames, [])]
        statuses = [(e.id, e.code, e.error_type, e.details) for e in r.errors]
        if r.size <= room:
            return [wc.encode_replies(r.frames, statuses)]
        out, parts, size = [], [], 0             # split at the client's frame limit
        for p in r.frames:
            if parts and size + len(p) > room:
                out.append(wc.encode_replies(parts, []))
                parts, size = [], 0
            parts.append(p)
            size += len(p)
        out.append(wc.encode_replies(parts, statuses))
        return out

    # --- stopping ----------------------------------------------------------------------------------

    async def _close(self, grace: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        end = time.monotonic() + grace
        while any(c.inflight_calls for c in self.conns) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        for c in list(self.conns):
            c.closed = True
            if c.tr is not None:
                c.tr.close()
            c.connection_lost(None)

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop accepting, let calls in flight finish for `grace` seconds, then close every connection."""
        if self._server is None:
            return
        try:
            self.wl.run(self._close(grace or 0.0), "stopping the wire server", timeout=(grace or 0.0) + 10)
        finally:
            self._server = None
            for _ in self._workers:
                self._jobs.put(None)
        # wait (a while) for the handlers' threads: one still in native code (pyarrow, gRPC) when
        # the process exits would be torn down mid-call at finalization, and the process would abort
        end = time.monotonic() + JOIN_S
        me = threading.current_thread()
        for t in [*self._workers, *list(self.stream_threads)]:
            if t is not me and t.ident is not None:
                t.join(max(0.0, end - time.monotonic()))

    def __enter__(self) -> "WireServer":
        if self.port is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
