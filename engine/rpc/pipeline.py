"""PipelinedTransport: unary calls from many threads share one bidirectional stream per connection.

A caller packs its call (id, method index, request bytes: engine/rpc/call_frames.py) and waits on
its own lock; gRPC's sender thread joins every queued call into one CallBatch once the threads
whose replies just came have called again; a reader thread matches the ReplyBatch frames to
callers by id. Each call has a deadline (DeadlineExceededError); a broken stream fails every call
in flight on it (RpcStreamBroken) and the next call opens a new stream. Streaming methods and
requests over MAX_INLINE_REQUEST bytes go as plain gRPC calls, unchanged.
"""
from __future__ import annotations

import threading
import time
from threading import get_ident
from typing import Any

import grpc

from logtide.engine.rpc import pipeline_pb2 as pb
from logtide.engine.rpc.call_frames import CALL_HEADER, MAX_METHODS, unpack_replies
from logtide.engine.rpc.error_mapping import code_of, from_status
from logtide.engine.rpc.pipeline_server import PIPELINE_PATH
from logtide.engine.rpc.service import MethodDef
from logtide.engine.rpc.transport import GrpcTransport, Transport
from logtide.errors import InvalidRequest, DeadlineExceededError, RpcError, RpcStreamBroken

# a pipelined call without a deadline of its own gets this one (every wait on a peer ends)
DEFAULT_DEADLINE_S = 60.0
# larger requests travel as plain unary calls: batching gains nothing there, and the server's own
# message limit then answers them exactly as before (MessageTooLarge)
MAX_INLINE_REQUEST = 32 << 10
# a CallBatch holds at most about this many request bytes (servers accept >= 1 MiB messages)
MAX_BATCH_BYTES = 256 << 10
# a batch waits for the threads that just got their replies to call again (see _requests) as long
# as some call was queued within the last LINGER_S, and at most LINGER_MAX_S in all
LINGER_S = 0.001
LINGER_MAX_S = 0.01
_pack_call = CALL_HEADER.pack
_now = time.monotonic


class _Slot:
    """One call in flight: its caller waits on `lock` (held until the reply or the failure). `reply` is
    the response bytes, or a PipelinedReply when the call failed at the server."""
    __slots__ = ("lock", "reply", "error", "caller")

    def __init__(self, caller: int) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.reply: Any = None
        self.error: BaseException | None = None
        self.caller = caller          # the calling thread's ident


class CallStream:
    """One open Pipeline.Calls stream: its queued calls, the calls in flight and its reader thread."""

    def __init__(self, channel: grpc.Channel, address: str, max_reply_bytes: int) -> None:
        self.address = address
        self._max_reply = max_reply_bytes
        self._cv = threading.Condition(threading.Lock())
        self._pending: list[bytes] = []        # packed call frames, in submission order
        self.inflight: dict[int, _Slot] = {}
        self.broken: BaseException | None = None
        self._next_id = 1
        self._method_ids: dict[str, int] = {}  # method path -> its index in every batch's `methods`
        self._methods: list[str] = []
        # threads whose reply was just handed over and that have not called again: the next batch
        # waits for them (see LINGER_S), so a round of callers travels as one message
        self._returning: set[int] = set()
        self._last_call = 0.0
        self.batches_sent = 0                 # CallBatch messages and calls sent (calls per batch: the batching)
        self.calls_sent = 0
        self._call = channel.stream_stream(PIPELINE_PATH)(self._requests())
        self._reader = threading.Thread(target=self._read, name="rpc-pipeline-reply", daemon=True)
        self._reader.start()

    def submit(self, path: str, data: bytes) -> tuple[int, _Slot] | None:
        """Queue a call; None when the stream is already broken (open another)."""
        me = get_ident()
        slot = _Slot(me)
        with self._cv:
            if self.broken is not None:
                return None
            m = self._method_ids.get(path)
            if m is None:
                if len(self._methods) >= MAX_METHODS:
                    raise RpcError(f"{path}: more than {MAX_METHODS} methods on one call stream")
                m = self._method_ids[path] = len(self._methods)
                self._methods.append(path)
            call_id = self._next_id
            self._next_id += 1
            self.inflight[call_id] = slot
            pending = self._pending
            pending.append(_pack_call(call_id, m, len(data)) + data)
            returning = self._returning
            returning.discard(me)
            self._last_call = _now()
            # wake the sender only when this call starts a batch or completes one (see _requests)
            if len(pending) == 1 or not returning:
                self._cv.notify()
        return call_id, slot

    def _requests(self):
        """The request side, run by gRPC's sender thread: every call queued meanwhile in one batch."""
        cv = self._cv
        while True:
            with cv:
                linger_end = None
                while self.broken is None:
                    n = len(self._pending)
                    # send once every thread that just got its reply has called again (the calls
                    # still at the server cannot join: their callers wait), or when no call came
                    # for LINGER_S (the others went on to other work), or after LINGER_MAX_S
                    if n and not self._returning:
                        break
                    if not n:
                        cv.wait()
                        continue
                    now = _now()
                    if linger_end is None:
                        linger_end = now + LINGER_MAX_S
                    end = min(linger_end, self._last_call + LINGER_S)
                    if now >= end:
                        self._returning.clear()     # those threads went on to other work
                        break
                    cv.wait(end - now)
                if self.broken is not None:
                    return
                frames, self._pending = self._pending, []
                methods = list(self._methods)
            self.calls_sent += len(frames)
            start, size = 0, 0
            for i, f in enumerate(frames):
                if size and size + len(f) > MAX_BATCH_BYTES:
                    self.batches_sent += 1
                    yield self._batch(methods, frames[start:i])
                    start, size = i, 0
                size += len(f)
            self.batches_sent += 1
            yield self._batch(methods, frames if start == 0 else frames[start:])

    def _batch(self, methods: list[str], frames: list[bytes]) -> bytes:
        return pb.CallBatch(max_reply_bytes=self._max_reply, methods=methods,
                            frames=b"".join(frames)).SerializeToString()

    def _read(self) -> None:
        inflight, pop, cv, returning = self.inflight, self.inflight.pop, self._cv, self._returning
        try:
            for raw in self._call:
                batch = pb.ReplyBatch.FromString(raw)
                done = []
                for call_id, data in unpack_replies(batch.frames):
                    slot = pop(call_id, None)
                    if slot is not None:       # else its caller's deadline passed
                        slot.reply = data
                        done.append(slot)
                for r in batch.errors:
                    slot = pop(r.id, None)
                    if slot is not None:
                        slot.reply = r
                        done.append(slot)
                with cv:                       # before they wake: see _requests
                    returning.update([s.caller for s in done])
                for slot in done:
                    slot.lock.release()
            err: BaseException = RpcStreamBroken(f"the call stream to {self.address} was ended by the server")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            err = RpcStreamBroken(f"the call stream to {self.address} broke: "
                                  f"{code.name if code else 'error'}: {details}")
        except Exception as exc:  # noqa: BLE001 - a reply that does not parse: the stream is unusable
            err = RpcStreamBroken(f"the call stream to {self.address} broke: {type(exc).__name__}: {exc}")
        self.fail(err)

    def fail(self, err: BaseException) -> None:
        """Break the stream: every call queued or in flight on it ends with `err`."""
        with self._cv:
            if self.broken is None:
                self.broken = err
            slots = list(self.inflight.values())
            self.inflight.clear()
            self._pending.clear()
            self._returning.clear()
            self._cv.notify_all()
        for s in slots:
            s.error = self.broken
            s.lock.release()

    def close(self, err: BaseException) -> None:
        self.fail(err)
        self._call.cancel()


class PipelinedTransport(Transport):
    """A GrpcTransport whose unary calls are pipelined on one CallStream; everything else is its own."""

    def __init__(self, inner: GrpcTransport, *, deadline: float | None = None) -> None:
        self.inner = inner
        self.address = inner.address
        self.deadline = deadline or inner.timeout or DEFAULT_DEADLINE_S
        self._lock = threading.Lock()
        self._stream: CallStream | None = None
        self._closed = False

    @property
    def stream(self) -> CallStream | None:
        """The current call stream (None before the first pipelined call)."""
        return self._stream

    def _submit(self, path: str, data: bytes) -> tuple[CallStream, int, _Slot]:
        while True:
            s = self._stream
            if s is None or s.broken is not None:
                with self._lock:
                    if self._closed:
                        raise RpcError(f"{path}: the client is closed")
                    s = self._stream
                    if s is None or s.broken is not None:   # reconnect: a new stream on the channel
                        s = self._stream = CallStream(self.inner.channel, self.address,
                                                      self.inner.max_message_size)
            got = s.submit(path, data)
            if got is not None:
                return s, got[0], got[1]
            if self._closed:
                raise RpcError(f"{path}: the client is closed")

    def unary(self, method: MethodDef, request: Any, timeout: float | None = None) -> Any:
        if not isinstance(request, method.request_type):
            raise InvalidRequest(f"{method.path} takes {method.request_type.__name__}, "
                                 f"not {type(request).__name__}")
        data = request.SerializeToString()
        if len(data) > MAX_INLINE_REQUEST:
            return self.inner.unary(method, request, timeout)
        wait = timeout or self.deadline
        start = time.monotonic()
        stream, call_id, slot = self._submit(method.path, data)
        if not slot.lock.acquire(True, wait):
            if stream.inflight.pop(call_id, None) is not None:
                raise DeadlineExceededError(f"{method.path}: no reply from {self.address} within {wait:g} s")
            slot.lock.acquire()               # the reply (or the failure) is being handed over right now
        if slot.error is not None:
            raise type(slot.error)(f"{method.path}: {slot.error} "
                                   f"(after {time.monotonic() - start:.3f} s)") from None
        r = slot.reply
        if r.__class__ is bytes:
            return method.response_type.FromString(r)
        raise from_status(code_of(r.code), r.error_type or None, r.details, method.path)

    def server_stream(self, method, request, timeout=None):
        return self.inner.server_stream(method, request, timeout)

    def client_stream(self, method, requests, timeout=None):
        return self.inner.client_stream(method, requests, timeout)

    def bidi(self, method, requests, timeout=None):
        return self.inner.bidi(method, requests, timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            s, self._stream = self._stream, None
        if s is not None:
            s.close(RpcError("the client is closed"))
        self.inner.close()
