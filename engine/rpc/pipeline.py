"""PipelinedTransport: unary calls from many threads share one bidirectional stream per connection.

A caller queues its call (id, method path, request bytes) and waits on its own lock; gRPC's sender
thread takes every queued call at once as one CallBatch; a reader thread matches the ReplyBatch
messages to callers by id. Each call has a deadline (DeadlineExceededError); a broken stream fails
every call in flight on it (RpcStreamBroken) and the next call opens a new stream. Streaming
methods and requests over MAX_INLINE_REQUEST bytes go as plain gRPC calls, unchanged.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import grpc

from logtide.engine.rpc import pipeline_pb2 as pb
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
_CALL_OVERHEAD = 16
# how long a batch may wait for more calls while fewer than half of the calls in flight are in it
LINGER_S = 0.0005


class _Slot:
    """One call in flight: its caller waits on `lock` (held until the reply or the failure)."""
    __slots__ = ("lock", "reply", "error")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.reply: Any = None
        self.error: BaseException | None = None


class CallStream:
    """One open Pipeline.Calls stream: its queued calls, the calls in flight and its reader thread."""

    def __init__(self, channel: grpc.Channel, address: str, max_reply_bytes: int) -> None:
        self.address = address
        self._max_reply = max_reply_bytes
        self._cv = threading.Condition(threading.Lock())
        self._pending: list[tuple[int, str, bytes]] = []
        self.inflight: dict[int, _Slot] = {}
        self.broken: BaseException | None = None
        self._next_id = 1
        self.batches_sent = 0                 # CallBatch messages and calls sent (calls per batch: the batching)
        self.calls_sent = 0
        self._call = channel.stream_stream(PIPELINE_PATH)(self._requests())
        self._reader = threading.Thread(target=self._read, name="rpc-pipeline-reply", daemon=True)
        self._reader.start()

    def submit(self, path: str, data: bytes) -> tuple[int, _Slot] | None:
        """Queue a call; None when the stream is already broken (open another)."""
        slot = _Slot()
        with self._cv:
            if self.broken is not None:
                return None
            call_id = self._next_id
            self._next_id += 1
            self.inflight[call_id] = slot
            pending = self._pending
            pending.append((call_id, path, data))
            # wake the sender only when this call starts a batch or completes one (see _requests)
            if len(pending) == 1 or 2 * len(pending) >= len(self.inflight):
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
                    # send once at least half the calls in flight wait to be sent (the others are at
                    # the server: their callers will not add to this batch before their replies come)
                    if n and 2 * n >= len(self.inflight):
                        break
                    if not n:
                        cv.wait()
                        continue
                    now = time.monotonic()
                    if linger_end is None:
                        linger_end = now + LINGER_S
                    elif now >= linger_end:
                        break
                    cv.wait(linger_end - now)
                if self.broken is not None:
                    return
                calls, self._pending = self._pending, []
            self.calls_sent += len(calls)
            msg, size = pb.CallBatch(max_reply_bytes=self._max_reply), 0
            for call_id, path, data in calls:
                n = len(data) + len(path) + _CALL_OVERHEAD
                if size and size + n > MAX_BATCH_BYTES:
                    self.batches_sent += 1
                    yield msg.SerializeToString()
                    msg, size = pb.CallBatch(max_reply_bytes=self._max_reply), 0
                msg.calls.add(id=call_id, method=path, request=data)
                size += n
            self.batches_sent += 1
            yield msg.SerializeToString()

    def _read(self) -> None:
        inflight = self.inflight
        try:
            for raw in self._call:
                for r in pb.ReplyBatch.FromString(raw).replies:
                    slot = inflight.pop(r.id, None)
                    if slot is None:          # its caller's deadline passed
                        continue
                    slot.reply = r
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
        if r.code:
            raise from_status(code_of(r.code), r.error_type or None, r.details, method.path)
        return method.response_type.FromString(r.response)

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
