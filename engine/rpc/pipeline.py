"""PipelinedTransport: unary calls from many threads share one bidirectional stream per connection.

A caller's call frame (id, method index, request bytes: engine/rpc/call_frames.py) is packed and
waited for in C (`_ext/call_slots.pyx`, CallSlots): the caller sleeps on its own futex with the
GIL released. The stream itself is a grpc.aio call on the process's CallLoop thread
(engine/rpc/call_loop.py), shared by every stream of every client in the process: the loop takes
every queued frame as one CallBatch once the threads whose replies just came have called again
(the slots write an eventfd when a call lets a batch go), and hands each ReplyBatch to the slots,
which settle the callers by id and wake them one after another. Each call has a deadline
(DeadlineExceededError); a broken stream fails every call in flight on it (RpcStreamBroken) and
the next call opens a new stream. Streaming methods and requests over MAX_INLINE_REQUEST bytes go
as plain gRPC calls on the synchronous channel, unchanged.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc
import grpc.aio

from logtide._ext.call_slots import CallSlots
from logtide.engine.rpc import fork_guard
from logtide.engine.rpc import pipeline_pb2 as pb
from logtide.engine.rpc.call_frames import MAX_METHODS
from logtide.engine.rpc.call_loop import CallLoop
from logtide.engine.rpc.error_mapping import code_of, from_status
from logtide.engine.rpc.pipeline_server import PIPELINE_PATH
from logtide.engine.rpc.service import MethodDef
from logtide.engine.rpc.tls import TlsConfig, grpc_channel
from logtide.engine.rpc.transport import GrpcTransport, Transport
from logtide.errors import InvalidRequest, DeadlineExceededError, RpcError, RpcStreamBroken

# a pipelined call without a deadline of its own gets this one (every wait on a peer ends)
DEFAULT_DEADLINE_S = 60.0
# larger requests travel as plain unary calls: batching gains nothing there, and the server's own
# message limit then answers them exactly as before (MessageTooLarge)
MAX_INLINE_REQUEST = 32 << 10
# a CallBatch holds at most about this many request bytes (servers accept >= 1 MiB messages)
MAX_BATCH_BYTES = 256 << 10
# a batch waits for the threads that just got their replies to call again (see CallSlots.take) as
# long as some call was queued within the last LINGER_S, and at most LINGER_MAX_S in all
LINGER_S = 0.001
LINGER_MAX_S = 0.01
# woken callers are handed on one by one as each enters its next wait; the sender wakes the rest
# of a chain that nobody passed on for HANDOFF_STALL_S (a caller that went on to other work)
HANDOFF_STALL_S = 0.0002


class CallStream:
    """One open Pipeline.Calls stream: its CallSlots (queued calls, waiting callers), driven by the
    process's CallLoop (engine/rpc/call_loop.py) over the transport's asyncio channel."""

    def __init__(self, achannel: "AioChannel", address: str, max_reply_bytes: int) -> None:
        self.address = address
        self._max_reply = max_reply_bytes
        self.slots = CallSlots(LINGER_S, LINGER_MAX_S, MAX_BATCH_BYTES, HANDOFF_STALL_S)
        self._lock = threading.Lock()
        self._method_ids: dict[str, int] = {}  # method path -> its index in every batch's `methods`
        self._methods: list[str] = []
        self._cl = achannel.loop
        self._efd = self.slots.open_notify()
        self._call = None
        self._writing = False
        self._timer = None
        self._done = False
        self._cl.run(self._open(achannel), f"opening the call stream to {address}")
        self._cl.resources.add(self)

    async def _open(self, achannel: "AioChannel") -> None:
        loop = asyncio.get_running_loop()
        self._call = achannel.channel().stream_stream(PIPELINE_PATH)()
        loop.add_reader(self._efd, self._on_notify)
        loop.create_task(self._read())
        self._pump()    # from now on a call that the batch rule lets go writes the eventfd

    @property
    def broken(self) -> BaseException | None:
        """Why the stream broke, or None while it is up."""
        return self.slots.failure

    @property
    def batches_sent(self) -> int:
        """CallBatch messages sent (with calls_sent: the calls per batch)."""
        return self.slots.batches

    @property
    def calls_sent(self) -> int:
        return self.slots.calls

    @property
    def inflight(self) -> int:
        """Calls queued or in flight that no reply or failure ended yet."""
        return self.slots.inflight

    def method_index(self, path: str) -> int:
        """The index of `path` in the stream's method table (added at its first call)."""
        m = self._method_ids.get(path)
        if m is None:
            with self._lock:
                m = self._method_ids.get(path)
                if m is None:
                    if len(self._methods) >= MAX_METHODS:
                        raise RpcError(f"{path}: more than {MAX_METHODS} methods on one call stream")
                    m = len(self._methods)
                    self._methods.append(path)
                    self._method_ids[path] = m
        return m

    # --- on the loop ------------------------------------------------------------------------------

    def _on_notify(self) -> None:
        self.slots.drain_notify()
        self._pump()

    def _pump(self) -> None:
        """Send what the batch rule lets go now, else wake again when it may (or at the eventfd)."""
        if self._writing or self._done:
            return
        r = self.slots.poll()
        if r.__class__ is bytes:
            self._writing = True
            # every method a frame of this batch names was added before the frame was queued
            msg = pb.CallBatch(max_reply_bytes=self._max_reply, methods=self._methods, frames=r).SerializeToString()
            asyncio.get_running_loop().create_task(self._write(msg))
        elif r is None:
            self._teardown()
        elif r >= 0:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(r, self._pump)

    async def _write(self, msg: bytes) -> None:
        try:
            await self._call.write(msg)
        except Exception as exc:  # noqa: BLE001 - the stream is gone (the reader reports why)
            self.fail(RpcStreamBroken(f"the call stream to {self.address} broke while sending: "
                                      f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._writing = False
        self._pump()

    async def _read(self) -> None:
        deliver = self.slots.deliver
        call = self._call
        try:
            while True:
                raw = await call.read()
                if raw is grpc.aio.EOF:
                    err: BaseException = RpcStreamBroken(f"the call stream to {self.address} was ended by the server")
                    break
                batch = pb.ReplyBatch.FromString(raw)
                deliver(batch.frames, batch.errors)
                self._pump()    # arms the linger and stall timers for the callers just woken
        except asyncio.CancelledError:
            err = RpcStreamBroken(f"the call stream to {self.address} was closed")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            err = RpcStreamBroken(f"the call stream to {self.address} broke: "
                                  f"{code.name if code else 'error'}: {details}")
        except Exception as exc:  # noqa: BLE001 - a reply that does not parse: the stream is unusable
            err = RpcStreamBroken(f"the call stream to {self.address} broke: {type(exc).__name__}: {exc}")
        self.slots.fail(err)
        self._teardown()

    def _teardown(self) -> None:
        if self._done:
            return
        self._done = True
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._efd)
        if self._timer is not None:
            self._timer.cancel()
        if self._call is not None:
            self._call.cancel()

    async def shutdown(self) -> None:
        """On the loop, at exit: end the stream."""
        self.slots.fail(RpcStreamBroken(f"the call stream to {self.address} was closed at exit"))
        self._teardown()

    # --- from any thread --------------------------------------------------------------------------

    def fail(self, err: BaseException) -> None:
        """Break the stream: every call queued or in flight on it ends with `err`."""
        self.slots.fail(err)
        if self._cl.in_loop():
            self._teardown()
        else:
            self._cl.call_soon(self._teardown)

    def close(self, err: BaseException) -> None:
        self.fail(err)


class AioChannel:
    """The transport's grpc.aio channel on the CallLoop (created there at the first stream)."""

    def __init__(self, address: str, options: list, tls: TlsConfig | None = None) -> None:
        self.address = address
        self.options = options
        self.tls = tls
        self.loop = CallLoop.get()
        self._channel = None
        self.loop.resources.add(self)

    async def shutdown(self) -> None:
        """On the loop, at exit: close the channel."""
        fork_guard.closed(self)
        ch, self._channel = self._channel, None
        if ch is not None:
            await ch.close()

    def channel(self):
        """On the loop: the channel (made at the first call)."""
        if self._channel is None:
            self._channel = grpc_channel(self.address, self.options, self.tls, aio=True)
            # open until closed, even if its client is dropped unclosed (its stream's task keeps it)
            fork_guard.opened(self)
        return self._channel

    def forked_copy(self) -> None:
        """In a forked child: the parent's channel is left as it is (see fork_guard)."""

    def close(self) -> None:
        fork_guard.closed(self)
        ch, self._channel = self._channel, None
        if ch is not None:
            try:
                self.loop.run(ch.close(), f"closing the channel to {self.address}")
            except Exception:  # noqa: BLE001 - the loop is gone (interpreter shutdown): nothing to release
                pass


class PipelinedTransport(Transport):
    """A GrpcTransport whose unary calls are pipelined on one CallStream; everything else is its own."""

    def __init__(self, inner: GrpcTransport, *, deadline: float | None = None) -> None:
        self.inner = inner
        self.address = inner.address
        self.deadline = deadline or inner.timeout or DEFAULT_DEADLINE_S
        self._lock = threading.Lock()
        self._stream: CallStream | None = None
        self._achannel: AioChannel | None = None
        self._closed = False
        self._forked = False
        fork_guard.opened(self)

    @property
    def stream(self) -> CallStream | None:
        """The current call stream (None before the first pipelined call)."""
        return self._stream

    def _open(self, path: str) -> CallStream:
        s = self._stream
        if s is None or s.broken is not None:
            if self._forked:      # before the lock: a parent thread may have held it at the fork
                raise fork_guard.refusal(path)
            with self._lock:
                if self._closed:
                    raise RpcError(f"{path}: the client is closed")
                s = self._stream
                if s is None or s.broken is not None:   # reconnect: a new stream on the channel
                    if self._achannel is None or self._achannel.loop is not CallLoop.get():
                        self._achannel = AioChannel(self.address, self.inner.channel_options, self.inner.tls)
                    s = self._stream = CallStream(self._achannel, self.address, self.inner.max_message_size)
        return s

    def unary(self, method: MethodDef, request: Any, timeout: float | None = None) -> Any:
        if not isinstance(request, method.request_type):
            raise InvalidRequest(f"{method.path} takes {method.request_type.__name__}, "
                                 f"not {type(request).__name__}")
        data = request.SerializeToString()
        if len(data) > MAX_INLINE_REQUEST:
            return self.inner.unary(method, request, timeout)
        return method.response_type.FromString(self.call_bytes(method.path, data, timeout))

    def call_bytes(self, path: str, data: bytes, timeout: float | None = None) -> bytes:
        """One pipelined unary call of `path` with serialized request `data` (at most
        MAX_INLINE_REQUEST bytes): the serialized reply, or the call's typed error."""
        wait = timeout or self.deadline
        start = time.monotonic()
        while True:
            stream = self._stream
            if stream is None or stream.slots.failure is not None:
                stream = self._open(path)
            r = stream.slots.call(stream.method_index(path), data, wait)
            if r.__class__ is bytes:
                return r
            if r is not False:
                break
            if self._closed:                  # that stream broke before the call was queued: open another
                raise RpcError(f"{path}: the client is closed")
        if r is None:
            raise DeadlineExceededError(f"{path}: no reply from {self.address} within {wait:g} s")
        if isinstance(r, BaseException):
            raise type(r)(f"{path}: {r} (after {time.monotonic() - start:.3f} s)") from None
        raise from_status(code_of(r.code), r.error_type or None, r.details, path)

    def server_stream(self, method, request, timeout=None):
        return self.inner.server_stream(method, request, timeout)

    def client_stream(self, method, requests, timeout=None):
        return self.inner.client_stream(method, requests, timeout)

    def bidi(self, method, requests, timeout=None):
        return self.inner.bidi(method, requests, timeout)

    def forked_copy(self) -> None:
        """In a child forked with this client open: forget the parent's stream (it stays referenced
        by fork_guard, untouched) so that the next call is refused (see fork_guard)."""
        self._forked = True
        self._parent_io = (self._stream, self._achannel)
        self._stream = self._achannel = None

    def close(self) -> None:
        fork_guard.closed(self)
        if self._forked:
            self._closed = True
            self.inner.close()
            return
        with self._lock:
            self._closed = True
            s, self._stream = self._stream, None
            ach, self._achannel = self._achannel, None
        if s is not None:
            s.close(RpcError("the client is closed"))
        if ach is not None:
            ach.close()
        self.inner.close()
