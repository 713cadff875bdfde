"""WireTransport: a client of the framed TCP carrier (docs/rpc.md, "The framed carrier").

One TCP connection per transport, on the process's WireLoop (engine/rpc/wire_loop.py). A unary
call is packed into the connection's CallSlots (_ext/call_slots.pyx) and its caller sleeps there
in C with the GIL released; the caller that completes a batch under the batch rule sends every
queued call as one CALLS frame on the socket itself (over TLS, or when it cannot, the slots write
an eventfd and the loop sends it). The loop hands each REPLIES frame to the slots, which wake its
callers at once; they pass the GIL on through the slots' gate. Streams are OPEN/MSG/END frames
on a stream id, with per-stream credit in both directions. Every call has a deadline
(DeadlineExceededError); a connection that breaks (reset, bad frame, GOAWAY, no answer to a
keepalive ping) fails every call and stream on it with RpcStreamBroken, and the next call opens a
new connection.
"""
from __future__ import annotations

import asyncio
import os
import queue
import ssl
import threading
import time
from collections import namedtuple
from typing import Any, Iterable

from logtide._ext import wire_codec as wc
from logtide._ext.call_slots import CallSlots
from logtide.engine.rpc import deadlines
from logtide.engine.rpc.error_mapping import code_of, from_status
from logtide.engine.rpc.frame_outbox import FrameOutbox
from logtide.engine.rpc.service import MethodDef
from logtide.engine.rpc.tls import TlsOption
from logtide.engine.rpc.tls import resolve as tls_resolve
from logtide.engine.rpc.transport import DEFAULT_MAX_MESSAGE_SIZE, ResponseStream, Transport
from logtide.engine.rpc.wire_loop import WireLoop
from logtide.engine.rpc.address import split_address
from logtide.errors import (ConnectionRefused, DeadlineExceededError, InvalidArgument, InvalidRequest, MessageTooLarge, RpcError,
                            RpcStreamBroken, TlsError, WireProtocolError)

K = wc.KINDS
K_REPLIES, K_MSG, K_END, K_CREDIT, K_PING, K_PONG, K_GOAWAY = (
    K["REPLIES"], K["MSG"], K["END"], K["CREDIT"], K["PING"], K["PONG"], K["GOAWAY"])
# the batch rule of the call slots (docs/rpc.md, "Pipelined calls"): a batch waits for the callers
# whose replies just came to call again, LINGER_S after the last call, LINGER_MAX_S at most
LINGER_S = 0.001
LINGER_MAX_S = 0.01
MAX_BATCH_BYTES = 256 << 10
# after a send that would have blocked, how often the loop looks whether its transport wrote it all
RELEASE_RECHECK_S = 0.0005
# messages a stream's receiver takes before the sender waits for credit (both directions)
STREAM_WINDOW = 32
# a frame may carry this much beside one message of max_message_size (headers, method table)
FRAME_SLACK = 64 << 10
# a call with no deadline (timeout <= 0) still wakes up this often to notice a closed client
_FOREVER_S = 1e9

Status = namedtuple("Status", "id code error_type details")   # a failed call, as CallSlots.deliver wants


def status_error(code: int, error_type: str, details: str, path: str) -> BaseException:
    """The typed error a status on the wire stands for (the same as over gRPC)."""
    return from_status(code_of(code), error_type or None, details, path)


class _Stream:
    """The client's end of one stream: received messages and the credit to send requests."""

    def __init__(self, conn: "_Conn", sid: int, method: MethodDef, deadline: float | None) -> None:
        self.conn, self.sid, self.method, self.deadline = conn, sid, method, deadline
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.cv = threading.Condition()
        self.credit = STREAM_WINDOW          # requests we may send before the server grants more
        self.taken = 0                        # replies taken since we last granted credit
        self.done = False                     # the server ended it (or the connection broke)
        self.finished = False                 # the caller saw its end

    # on the loop
    def on_msg(self, data: bytes) -> None:
        self.inbox.put(data)

    def on_end(self, outcome: BaseException | None) -> None:
        with self.cv:
            self.done = True
            self.cv.notify_all()
        self.inbox.put(outcome)

    def on_credit(self, n: int) -> None:
        with self.cv:
            self.credit += n
            self.cv.notify_all()

    # in the caller's threads
    def _left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def send(self, request: Any) -> None:
        """Send one request message (waits for credit, within the deadline)."""
        if not isinstance(request, self.method.request_type):
            raise InvalidRequest(f"{self.method.path} takes {self.method.request_type.__name__}, "
                                 f"not {type(request).__name__}")
        data = request.SerializeToString()
        self.conn.check_size(self.method.path, len(data) + 9)
        with self.cv:
            while self.credit <= 0 and not self.done:
                left = self._left()
                if left is not None and left <= 0:
                    self.cancel()
                    raise DeadlineExceededError(f"{self.method.path}: no credit from {self.conn.address} in time")
                self.cv.wait(0.5 if left is None else min(left, 0.5))
            if self.done:
                return                        # the server ended the stream: its END says how
            self.credit -= 1
        self.conn.send(wc.encode_msg(self.sid, data))

    def try_send(self, request: Any) -> bool:
        """send() without waiting: False when there is no credit, the stream ended or the message
        is over the server's limit (the caller keeps it for the request iterator)."""
        if not isinstance(request, self.method.request_type):
            return False
        return self.try_send_bytes(request.SerializeToString())

    def try_send_bytes(self, data: bytes) -> bool:
        """try_send of a request serialized already (the caller vouches for its type)."""
        if len(data) + 9 > self.conn.peer_limit > 0:
            return False
        with self.cv:
            if self.credit <= 0 or self.done:
                return False
            self.credit -= 1
        self.conn.send(wc.encode_msg(self.sid, data))
        return True

    def close_requests(self) -> None:
        if not self.done:
            self.conn.send(wc.encode_end(self.sid))

    def __iter__(self) -> "_Stream":
        return self

    def __next__(self) -> Any:
        if self.finished:
            raise StopIteration
        left = self._left()
        try:
            item = self.inbox.get(timeout=None if left is None else max(left, 0.0))
        except queue.Empty:
            self.cancel()
            raise DeadlineExceededError(f"{self.method.path}: no message from {self.conn.address} in time") from None
        if item.__class__ is bytes:
            self.taken += 1
            if self.taken >= STREAM_WINDOW // 2 and not self.done:
                self.conn.send(wc.encode_credit(self.sid, self.taken))
                self.taken = 0
            try:
                return self.method.response_type.FromString(item)
            except Exception as exc:  # noqa: BLE001 - a reply that does not parse: the server's bug
                self.cancel()
                raise RpcStreamBroken(f"{self.method.path}: a reply that does not parse: {exc}") from None
        self.finished = True
        self.conn.forget(self.sid)
        if item is None:
            raise StopIteration
        raise item

    def cancel(self) -> None:
        """Stop the stream (the server's servicer sees is_active() turn False); a thread waiting
        for its next reply ends as at the stream's end."""
        if not self.finished:
            self.finished = True
            if not self.done:
                self.conn.send(wc.encode_cancel(self.sid))
            self.conn.forget(self.sid)
            self.inbox.put(None)   # no END comes after a CANCEL: wake a reader blocked in __next__


class _Conn(asyncio.Protocol):
    """One connection to a framed server, on the WireLoop."""

    def __init__(self, address: str, max_frame: int, keepalive: float, keepalive_timeout: float) -> None:
        self.address = address
        self.wl = WireLoop.get()
        self.reader = wc.FrameReader(max_frame, preface=True)
        self.max_frame = max_frame
        self.keepalive, self.keepalive_timeout = keepalive, keepalive_timeout
        self.slots: CallSlots | None = None
        self.peer_limit = 0
        self.tr: asyncio.Transport | None = None
        self.ready: asyncio.Future | None = None
        self.tls = False                       # the connection runs over TLS
        self.lock = threading.Lock()
        self.paths: list[str] = []            # method index -> path
        self.index: dict[str, int] = {}
        self.sent_methods = 0
        self.streams: dict[int, _Stream] = {}
        self.next_sid = 1
        self.outbox = FrameOutbox(lambda: self.wl.call_soon(self._flush))   # frames from other threads
        self.write_paused = False
        self.direct = False                   # callers send their own batches (CallSlots.attach)
        self.release_armed = False
        self.timer = None
        self.pump_timer: asyncio.TimerHandle | None = None   # the one armed linger wake-up
        self.pump_at = 0.0
        self.heard = time.monotonic()         # when a frame last came in
        self.ping_at = 0.0                    # when the unanswered ping went (0: none)
        self.broken: BaseException | None = None

    # --- set-up (on the loop) ---------------------------------------------------------------------

    async def open(self, host: str, port: int, timeout: float, ssl_ctx=None) -> None:
        loop = asyncio.get_running_loop()
        self.ready = loop.create_future()
        self.tls = ssl_ctx is not None
        tls = {} if ssl_ctx is None else {"ssl": ssl_ctx, "server_hostname": host,
                                          "ssl_handshake_timeout": max(0.001, timeout)}
        try:
            await asyncio.wait_for(loop.create_connection(lambda: self, host, port, **tls), timeout)
            await asyncio.wait_for(asyncio.shield(self.ready), max(0.0, timeout))
        except (asyncio.TimeoutError, TimeoutError):
            self._close_now(None)
            raise DeadlineExceededError(f"could not connect to {self.address} within {timeout:g} s") from None
        except ssl.SSLError as exc:
            raise TlsError(f"TLS with {self.address} failed: {exc}") from None
        except ConnectionRefusedError as exc:
            raise ConnectionRefused(f"could not connect to {self.address}: {exc}") from None
        except OSError as exc:
            raise RpcError(f"could not connect to {self.address}: {exc}") from None
        batch = max(1, min(MAX_BATCH_BYTES, self.peer_limit - 1))
        self.slots = CallSlots(LINGER_S, LINGER_MAX_S, batch)
        loop.add_reader(self.slots.open_notify(), self._on_notify)
        # TLS encrypts on the loop: the loop sends every batch. A transport that is closing may
        # have given its file number back already, so it is not attached either.
        if not self.tls and self.broken is None and not self.tr.is_closing():
            self.slots.attach(self.tr.get_extra_info("socket").fileno())
            self.direct = True
            self._release_soon()
        self.timer = loop.call_later(self.keepalive, self._tick)
        self._pump()    # from now on a call that the batch rule lets go writes the eventfd

    def connection_made(self, transport) -> None:
        self.tr = transport
        transport.write(wc.preface(self.max_frame))

    def data_received(self, data: bytes) -> None:
        self.heard = time.monotonic()
        self.ping_at = 0.0
        try:
            frames = self.reader.feed(data)
        except WireProtocolError as exc:
            self._fail(RpcStreamBroken(f"the connection to {self.address} broke: it sent a bad frame: {exc}"))
            return
        if self.ready is not None and not self.ready.done() and self.reader.peer_limit:
            self.peer_limit = self.reader.peer_limit
            self.ready.set_result(None)
        delivered = False
        for f in frames:
            k = f[0]
            if k == K_REPLIES:
                if self.slots is not None:
                    self.slots.deliver(f[1], [Status(*s) for s in f[2]] if f[2] else ())
                delivered = True
            elif k == K_MSG or k == K_END or k == K_CREDIT:
                s = self.streams.get(f[1])
                if s is None:
                    continue                  # a stream this side cancelled or finished
                if k == K_MSG:
                    s.on_msg(f[2])
                elif k == K_CREDIT:
                    s.on_credit(f[2])
                else:
                    s.on_end(None if f[2] == 0 else status_error(f[2], f[3], f[4], s.method.path))
            elif k == K_PING:
                self._write(wc.encode_ping(f[1], pong=True))
            elif k == K_PONG:
                pass
            elif k == K_GOAWAY:
                self._fail(RpcStreamBroken(f"the server at {self.address} closed the connection: "
                                           f"{f[2] or 'error'}: {f[3]}"))
                return
            else:
                self._fail(RpcStreamBroken(f"the connection to {self.address} broke: the server sent a "
                                           f"frame of kind {k}, which only a client sends"))
                return
        if delivered:
            self._pump()                       # arms the linger timer for the woken callers

    def connection_lost(self, exc) -> None:
        if isinstance(exc, ssl.SSLError) or (self.tls and self.ready is not None and not self.ready.done()):
            # TLS 1.3 finishes the client's handshake before the server checks its certificate:
            # a refusal shows as the connection closing before the server's preface
            why = exc or "the server closed the connection before its preface (did it refuse this certificate?)"
            self._fail(TlsError(f"TLS with {self.address} failed: {why}"), close=False)
            return
        why = f": {exc}" if exc else ""
        self._fail(RpcStreamBroken(f"the connection to {self.address} was closed{why}"), close=False)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._pump()

    # --- sending (on the loop) --------------------------------------------------------------------

    def _on_notify(self) -> None:
        self.slots.drain_notify()
        if self.direct:
            rest = self.slots.take_rest()     # a caller's send that would have blocked: first out
            if rest is not None and self.broken is None:
                self.tr.write(rest)
                self._release_soon()
        self._pump()

    def _write(self, data: bytes) -> None:
        """Write a frame from the loop (through the slots' writer while callers may send)."""
        if self.direct:
            data = self.slots.write(data)
            if data is None:
                return
            self._release_soon()
        self.tr.write(data)

    def _release_soon(self) -> None:
        if not self.release_armed:
            self.release_armed = True
            asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        """Let callers send again once the transport wrote all it holds."""
        self.release_armed = False
        if self.broken is not None or not self.direct:
            return
        if self.tr.get_write_buffer_size() == 0:
            self.slots.release()
        else:
            self.release_armed = True
            asyncio.get_running_loop().call_later(RELEASE_RECHECK_S, self._release)

    def _pump(self) -> None:
        """Send the calls the batch rule lets go now, else come back when it may (or at the eventfd)."""
        if self.broken is not None or self.write_paused or self.slots is None:
            return
        while True:
            r = self.slots.poll()
            if r.__class__ is not bytes:
                break
            self._bind_methods()               # every method a queued call names, first
            self._write(wc.encode_calls(r))
            if self.write_paused:
                return
        if r is None or r < 0:
            if self.pump_timer is not None:     # nothing left to time: no wake-up in the next chain
                self.pump_timer.cancel()
                self.pump_timer = None
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + r
        if self.pump_timer is not None:
            if self.pump_at <= due:
                return                          # an earlier wake-up is already armed
            self.pump_timer.cancel()
        self.pump_at = due
        self.pump_timer = loop.call_at(due, self._on_pump_timer)

    def _on_pump_timer(self) -> None:
        self.pump_timer = None
        self._pump()

    def _bind_methods(self) -> None:
        n = len(self.paths)
        if self.sent_methods < n:
            self._write(wc.encode_methods(self.sent_methods, self.paths[self.sent_methods:n]))
            self.sent_methods = n
            if self.slots is not None:
                self.slots.bind_methods(n)

    def _flush(self) -> None:
        out = self.outbox.take()
        if self.broken is None and self.tr is not None:
            self._bind_methods()
            if self.direct:
                self._write(b"".join(out))
            else:
                self.tr.writelines(out)

    def _tick(self) -> None:
        """Keepalive: ping while calls or streams wait; no answer within keepalive_timeout breaks it."""
        if self.broken is not None:
            return
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        if self.ping_at and now - self.ping_at >= self.keepalive_timeout:
            self._fail(RpcStreamBroken(f"the server at {self.address} did not answer a keepalive ping "
                                       f"within {self.keepalive_timeout:g} s"))
            return
        busy = self.streams or (self.slots is not None and self.slots.inflight)
        if busy and not self.ping_at and now - self.heard >= self.keepalive:
            self.ping_at = now
            self._write(wc.encode_ping(int(now * 1e6)))
            self.timer = loop.call_later(self.keepalive_timeout, self._tick)
            return
        self.timer = loop.call_later(self.keepalive, self._tick)

    # --- failure ----------------------------------------------------------------------------------

    def _fail(self, err: BaseException, close: bool = True) -> None:
        """On the loop: every call and stream on this connection ends with `err`."""
        if self.broken is None:
            self.broken = err
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(err)
            self.ready.exception()     # no one may wait on it any more: not an unretrieved error
        if self.slots is not None:
            self.slots.fail(self.broken)
            self.direct = False
            self.slots.detach()               # before the transport closes the socket
            try:
                asyncio.get_running_loop().remove_reader(self.slots.open_notify())
            except Exception:  # noqa: BLE001 - the loop is closing
                pass
        if self.timer is not None:
            self.timer.cancel()
        for s in list(self.streams.values()):
            s.on_end(self.broken)
        self.streams.clear()
        if close:
            self._close_now(None)

    def _close_now(self, _) -> None:
        if self.tr is not None and not self.tr.is_closing():
            self.tr.close()

    # --- from any thread --------------------------------------------------------------------------

    def method_index(self, path: str) -> int:
        m = self.index.get(path)
        if m is None:
            with self.lock:
                m = self.index.get(path)
                if m is None:
                    if len(self.paths) >= wc.METHOD_LIMIT:
                        raise RpcError(f"{path}: more than {wc.METHOD_LIMIT} methods on one connection")
                    m = len(self.paths)
                    self.paths.append(path)
                    self.index[path] = m
        return m

    def check_size(self, path: str, frame_body: int) -> None:
        if frame_body > self.peer_limit:
            raise MessageTooLarge(f"{path}: a frame of {frame_body} bytes is over the server's limit "
                                  f"of {self.peer_limit}")

    def send(self, frame: bytes) -> None:
        """Write a frame (from any thread; frames from one thread keep their order)."""
        self.outbox.put(frame)

    def open_stream(self, method: MethodDef, deadline: float | None) -> _Stream:
        if self.broken is not None:
            raise self.broken
        m = self.method_index(method.path)
        with self.lock:     # ids go out in the order they are taken: the server wants them rising
            sid = self.next_sid
            self.next_sid += 1
            s = self.streams[sid] = _Stream(self, sid, method, deadline)
            self.outbox.put(wc.encode_open(sid, m))
        return s

    def forget(self, sid: int) -> None:
        with self.lock:
            self.streams.pop(sid, None)

    def close(self, err: BaseException) -> None:
        self.wl.call_soon(self._fail, err)


class WireTransport(Transport):
    """Calls over the framed carrier to "host:port"; the same calls, deadlines and typed errors as
    GrpcTransport (see the module doc). Safe to share between threads: their unary calls batch."""

    def __init__(self, address: str, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 timeout: float | None = None, connect_timeout: float | None = 10.0,
                 keepalive: float | None = None, keepalive_timeout: float | None = None,
                 tls: TlsOption = None) -> None:
        self.host, self.port = split_address(address)
        cfg = tls_resolve(tls)
        self.ssl = cfg.client_context() if cfg is not None else None
        self.address = address
        self.timeout = timeout
        self.max_message_size = max_message_size
        self.connect_timeout = connect_timeout or 10.0
        self.keepalive = deadlines.KEEPALIVE_S if keepalive is None else keepalive
        self.keepalive_timeout = deadlines.KEEPALIVE_TIMEOUT_S if keepalive_timeout is None else keepalive_timeout
        self._lock = threading.Lock()
        self._conn: _Conn | None = None
        self._pid = os.getpid()
        self._forks = WireLoop.forks          # a change means a forked child (see _connection)
        self._closed = False
        if connect_timeout:
            self._connection(time.monotonic() + connect_timeout)

    @property
    def connection(self) -> _Conn | None:
        """The current connection (None before the first call)."""
        return self._conn

    def _connection(self, deadline: float | None) -> _Conn:
        c = self._conn
        if c is not None and c.broken is None and self._pid == os.getpid():
            return c
        with self._lock:
            if self._closed:
                raise RpcError(f"the client of {self.address} is closed")
            if self._pid != os.getpid():      # a forked child: the parent's connection is not ours
                self._pid, self._conn = os.getpid(), None
            self._forks = WireLoop.forks
            c = self._conn
            if c is None or c.broken is not None:
                wait = self.connect_timeout
                if deadline is not None:
                    wait = max(0.001, min(wait, deadline - time.monotonic()))
                c = _Conn(self.address, self.max_message_size + FRAME_SLACK, self.keepalive, self.keepalive_timeout)
                c.wl.run(c.open(self.host, self.port, wait, self.ssl), f"connecting to {self.address}",
                         timeout=wait + 5.0)
                self._conn = c
        return c

    def unary(self, method: MethodDef, request: Any, timeout: float | None = None) -> Any:
        if not isinstance(request, method.request_type):
            raise InvalidRequest(f"{method.path} takes {method.request_type.__name__}, "
                                 f"not {type(request).__name__}")
        data = self.call_bytes(method.path, request.SerializeToString(), timeout)
        try:
            return method.response_type.FromString(data)
        except Exception as exc:  # noqa: BLE001 - the server's bug, not the caller's
            raise RpcError(f"{method.path}: a reply that does not parse: {exc}") from None

    def call_bytes(self, path: str, data: bytes, timeout: float | None = None) -> bytes:
        """One unary call of `path` with serialized request `data`: the serialized reply, or the
        call's typed error."""
        t = deadlines.call_timeout(timeout, self.timeout)
        start = time.monotonic()
        while True:
            c = self._conn
            if c is None or c.broken is not None or self._forks != WireLoop.forks:
                c = self._connection(None if t is None else start + t)
            if len(data) + 15 > c.peer_limit:
                c.check_size(path, len(data) + 15)
            m = c.index.get(path)
            r = c.slots.call(c.method_index(path) if m is None else m, data,
                             _FOREVER_S if t is None else start + t - time.monotonic())
            if r.__class__ is bytes:
                return r
            if r is not False:
                break
            # that connection broke before the call was queued: open another
        if r is None:
            raise DeadlineExceededError(f"{path}: no reply from {self.address} in time")
        if isinstance(r, BaseException):
            raise type(r)(f"{path}: {r}") from None
        raise status_error(r.code, r.error_type, r.details, path)

    def _open(self, method: MethodDef, timeout: float | None) -> _Stream:
        t = timeout or self.timeout
        deadline = time.monotonic() + t if t else None
        return self._connection(deadline).open_stream(method, deadline)

    def server_stream(self, method, request, timeout=None):
        s = self._open(method, timeout)
        s.send(request)
        s.close_requests()
        return ResponseStream(s, s.cancel, method.path, _same)

    def client_stream(self, method, requests: Iterable, timeout=None):
        s = self._open(method, timeout)
        try:
            for r in requests:
                s.send(r)
            s.close_requests()
            replies = list(s)
        except BaseException:
            s.cancel()
            raise
        if len(replies) != 1:
            raise RpcError(f"{method.path}: {len(replies)} replies to a client-streaming call")
        return replies[0]

    def bidi(self, method, requests: Iterable, timeout=None):
        s = self._open(method, timeout)

        def pump() -> None:   # the request iterator may block: it gets a thread of its own
            try:
                for r in requests:
                    if s.finished or s.done:
                        return
                    s.send(r)
                s.close_requests()
            except BaseException as exc:  # noqa: B902 - the stream ends with it
                s.on_end(exc if isinstance(exc, Exception) else RpcError(str(exc)))
                s.cancel()
        threading.Thread(target=pump, name="rpc-wire-requests", daemon=True).start()
        return ResponseStream(s, s.cancel, method.path, _same, try_send=s.try_send,
                              try_send_bytes=s.try_send_bytes)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            c, self._conn = self._conn, None
        if c is not None and self._pid == os.getpid():
            c.close(RpcError(f"the client of {self.address} is closed"))


def _same(exc: BaseException, method: str) -> BaseException:
    return exc
