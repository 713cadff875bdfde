"""Transports: how a client's call reaches a servicer. In-process (direct calls) or gRPC."""
from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from typing import Any, Iterable, Iterator

from logtide.engine.rpc import deadlines, fork_guard
from logtide.engine.rpc.error_mapping import from_rpc_error
from logtide.engine.rpc.service import CallContext, MethodDef
from logtide.engine.rpc.tls import TlsOption, grpc_channel
from logtide.engine.rpc.tls import resolve as tls_resolve
from logtide.errors import DeadlineExceededError, InvalidRequest, LogtideError, RemoteError, RpcError

log = logging.getLogger("logtide.rpc")

DEFAULT_MAX_MESSAGE_SIZE = 64 << 20


class ResponseStream:
    """The responses of a streaming call; iterate it, or cancel() to stop early."""

    def __init__(self, it: Iterator, cancel, method: str, map_error, try_send=None, try_send_bytes=None) -> None:
        self._it = it
        self._cancel = cancel
        self._method = method
        self._map_error = map_error
        self._try_send = try_send
        self._try_send_bytes = try_send_bytes

    def try_send(self, request: Any) -> bool:
        """Send one more request of a bidi call from this thread, if the stream takes it without
        waiting (True); False: it cannot now (no credit, ended, too large, or a carrier that only
        reads the request iterator), so hand it to the iterator instead."""
        return self._try_send is not None and self._try_send(request)

    def try_send_bytes(self, data: bytes) -> bool:
        """try_send of a request serialized already, as its method's request type (the caller
        vouches for it): no message object built just to be serialized again."""
        return self._try_send_bytes is not None and self._try_send_bytes(data)

    def __iter__(self) -> "ResponseStream":
        return self

    def __next__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            raise
        except BaseException as exc:  # noqa: B902 - mapped to the same typed errors as unary calls
            mapped = self._map_error(exc, self._method)
            if mapped is exc:
                raise
            raise mapped from None

    def cancel(self) -> None:
        self._cancel()

    def __del__(self) -> None:  # dropped unfinished: stop the producer instead of leaving it blocked
        try:
            self._cancel()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass


class Transport(ABC):
    """Carries calls of every shape: unary, server_stream, client_stream, bidi."""

    @abstractmethod
    def unary(self, method: MethodDef, request: Any, timeout: float | None = None) -> Any: ...

    @abstractmethod
    def server_stream(self, method: MethodDef, request: Any, timeout: float | None = None) -> ResponseStream: ...

    @abstractmethod
    def client_stream(self, method: MethodDef, requests: Iterable, timeout: float | None = None) -> Any: ...

    @abstractmethod
    def bidi(self, method: MethodDef, requests: Iterable, timeout: float | None = None) -> ResponseStream: ...

    def close(self) -> None:
        pass

    def invoke(self, method: MethodDef, request: Any, timeout: float | None = None) -> Any:
        return getattr(self, method.shape)(method, request, timeout)


def _internal(exc: BaseException, method: str) -> BaseException:
    """What a non-logtide servicer failure looks like to the caller (as over gRPC: INTERNAL)."""
    if isinstance(exc, LogtideError):
        return exc
    return RemoteError(f"{method}: INTERNAL: {type(exc).__name__}: {exc}")


class InProcessTransport(Transport):
    """Direct calls into a servicer object in this process. Typed errors pass through unchanged;
    any other servicer failure becomes RemoteError, as it would over gRPC. With copy=True every
    message is serialized and parsed again, so neither side can see the other's objects."""

    def __init__(self, servicer: Any, copy: bool = False, peer: str = "inproc") -> None:
        self._servicer = servicer
        self._copy = copy
        self._peer = peer
        self._closed = False

    def _fn(self, method: MethodDef):
        if self._closed:
            raise RpcError(f"{method.path}: the in-process transport is closed")
        fn = getattr(self._servicer, method.name, None)
        if fn is None:
            raise InvalidRequest(f"{method.path}: the servicer does not implement {method.name}")
        return fn

    def _in(self, method: MethodDef, msg: Any) -> Any:
        if not isinstance(msg, method.request_type):
            raise InvalidRequest(f"{method.path} takes {method.request_type.__name__}, "
                                 f"not {type(msg).__name__}")
        return method.request_type.FromString(msg.SerializeToString()) if self._copy else msg

    def _out(self, method: MethodDef, msg: Any) -> Any:
        if not isinstance(msg, method.response_type):
            raise RemoteError(f"{method.path}: INTERNAL: servicer returned {type(msg).__name__}, "
                              f"not {method.response_type.__name__}")
        return method.response_type.FromString(msg.SerializeToString()) if self._copy else msg

    def unary(self, method, request, timeout=None):
        fn = self._fn(method)
        request = self._in(method, request)
        try:
            resp = fn(request, CallContext(self._peer))
        except BaseException as exc:
            mapped = _internal(exc, method.path)
            if mapped is exc:
                raise
            raise mapped from exc
        return self._out(method, resp)

    def _stream(self, method, fn, arg) -> ResponseStream:
        """Run a streaming servicer method in its own thread, as a gRPC server would: a servicer may
        block on its request stream while the caller is still producing requests."""
        ctx = CallContext(self._peer)
        pump = _Pump(lambda: fn(arg, ctx), lambda m: self._out(method, m), ctx)
        return ResponseStream(pump, pump.cancel, method.path, _internal)

    def _requests(self, method, requests):
        for r in requests:
            yield self._in(method, r)

    def server_stream(self, method, request, timeout=None):
        return self._stream(method, self._fn(method), self._in(method, request))

    def client_stream(self, method, requests, timeout=None):
        fn = self._fn(method)
        try:
            resp = fn(self._requests(method, requests), CallContext(self._peer))
        except BaseException as exc:
            mapped = _internal(exc, method.path)
            if mapped is exc:
                raise
            raise mapped from exc
        return self._out(method, resp)

    def bidi(self, method, requests, timeout=None):
        return self._stream(method, self._fn(method), self._requests(method, requests))

    def close(self) -> None:
        self._closed = True


class _Pump:
    """Iterates a servicer's response generator in a thread, handing messages over a bounded queue."""

    _ITEM, _END, _ERROR = 0, 1, 2

    def __init__(self, start, check, ctx: CallContext, depth: int = 64) -> None:
        self._start, self._check, self._ctx = start, check, ctx
        self._q: queue.Queue = queue.Queue(depth)
        self._finished = False
        threading.Thread(target=self._run, name="rpc-inproc-stream", daemon=True).start()

    def _put(self, item) -> bool:
        while self._ctx.is_active():
            try:
                self._q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        gen = None
        try:
            gen = iter(self._start())
            for msg in gen:
                if not self._put((self._ITEM, self._check(msg))):
                    return
            self._put((self._END, None))
        except BaseException as exc:  # noqa: B902 - handed to the caller
            self._put((self._ERROR, exc))
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                close()

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        kind, value = self._q.get()
        if kind == self._ITEM:
            return value
        self._finished = True
        if kind == self._END:
            raise StopIteration
        raise value

    def cancel(self) -> None:
        self._ctx.cancel()
        self._finished = True


class GrpcTransport(Transport):
    """Calls over a gRPC channel to "host:port". Failures come back as the server's typed errors.

    Every unary and client-streaming call has a deadline: its own `timeout`, else the client's,
    else `deadlines.CALL_TIMEOUT_S`; past it the call raises DeadlineExceededError. Streams are
    watched by keepalive pings (`keepalive` seconds apart, `keepalive_timeout` to answer): a
    server that is gone, stopped or cut off ends them with RpcError. See engine/rpc/deadlines.py."""

    def __init__(self, address: str, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 timeout: float | None = None, connect_timeout: float | None = 10.0,
                 keepalive: float | None = None, keepalive_timeout: float | None = None,
                 tls: TlsOption = None) -> None:
        import grpc
        fork_guard.check(f"connecting to {address}")
        self.tls = tls_resolve(tls)
        self._grpc = grpc
        self._forked = False
        self.address = address
        self._timeout = timeout
        self.timeout = timeout                  # the default per-call deadline (None: none)
        self.max_message_size = max_message_size
        self.channel_options = [
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", max_message_size),
        ] + deadlines.client_options(keepalive, keepalive_timeout)
        self._channel = grpc_channel(address, self.channel_options, self.tls)
        self._calls: dict[str, Any] = {}
        self._lock = threading.Lock()
        fork_guard.opened(self)
        if connect_timeout:
            try:
                grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
            except grpc.FutureTimeoutError:
                self.close()
                raise DeadlineExceededError(f"could not connect to {address} within {connect_timeout:g} s") from None

    def _callable(self, method: MethodDef):
        c = self._calls.get(method.path)
        if c is None:
            if self._forked:
                raise fork_guard.refusal(method.path)
            with self._lock:
                factory = {"unary": self._channel.unary_unary, "server_stream": self._channel.unary_stream,
                           "client_stream": self._channel.stream_unary, "bidi": self._channel.stream_stream}
                c = factory[method.shape](method.path, request_serializer=_serialize(method),
                                          response_deserializer=method.response_type.FromString)
                self._calls[method.path] = c
        return c

    def _map(self, exc: BaseException, path: str) -> BaseException:
        if isinstance(exc, self._grpc.RpcError):
            return from_rpc_error(exc, path)
        return exc

    def _check(self, method: MethodDef, msg: Any) -> Any:
        if not isinstance(msg, method.request_type):
            raise InvalidRequest(f"{method.path} takes {method.request_type.__name__}, not {type(msg).__name__}")
        return msg

    def _deadline(self, timeout: float | None) -> float | None:
        return deadlines.call_timeout(timeout, self._timeout)

    def unary(self, method, request, timeout=None):
        try:
            return self._callable(method)(self._check(method, request), timeout=self._deadline(timeout))
        except self._grpc.RpcError as exc:
            raise from_rpc_error(exc, method.path) from None

    def server_stream(self, method, request, timeout=None):
        call = self._callable(method)(self._check(method, request), timeout=timeout or self._timeout)
        return ResponseStream(call, call.cancel, method.path, self._map)

    def client_stream(self, method, requests, timeout=None):
        try:
            return self._callable(method)((self._check(method, r) for r in requests),
                                          timeout=self._deadline(timeout))
        except self._grpc.RpcError as exc:
            raise from_rpc_error(exc, method.path) from None

    def bidi(self, method, requests, timeout=None):
        call = self._callable(method)((self._check(method, r) for r in requests), timeout=timeout or self._timeout)
        return ResponseStream(call, call.cancel, method.path, self._map)

    @property
    def channel(self):
        """The grpc.Channel (the call pipeline opens its stream on it)."""
        return self._channel

    def close(self) -> None:
        fork_guard.closed(self)
        if not self._forked:      # a forked child leaves the parent's channel alone
            self._channel.close()

    def forked_copy(self) -> None:
        """In a child forked with this transport open: refuse every call (see fork_guard)."""
        self._forked = True
        self._calls = {}


def _serialize(method: MethodDef):
    def ser(msg):
        return msg.SerializeToString()
    return ser
