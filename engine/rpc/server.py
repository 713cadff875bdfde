"""RpcServer: serves servicers over gRPC, with typed errors and bad requests answered, never fatal."""
from __future__ import annotations

import logging
import threading
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from logtide.engine.rpc import deadlines, fork_guard
from logtide.engine.rpc.address import split_address
from logtide.engine.rpc.error_mapping import ERROR_TYPE_KEY, code_of, failure_status
from logtide.engine.rpc.service import CallContext, MethodDef, ServiceDef
from logtide.engine.rpc.tls import TlsOption
from logtide.engine.rpc.tls import resolve as tls_resolve
from logtide.engine.rpc.transport import DEFAULT_MAX_MESSAGE_SIZE
from logtide.errors import InvalidRequest, RpcError

log = logging.getLogger("logtide.rpc")


class RpcServer:
    """A gRPC server on `address` ("127.0.0.1:0" picks a free port; `start()` returns it)."""

    def __init__(self, address: str = "127.0.0.1:0", *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 max_workers: int = 16, keepalive: float | None = None,
                 keepalive_timeout: float | None = None, tls: TlsOption = None) -> None:
        fork_guard.check(f"an RPC server on {address}")
        self._address = address
        self.tls = tls_resolve(tls)
        self._forked = False
        self.max_message_size = max_message_size
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
                                   handlers=[_Router(self._methods)], options=[
                                       ("grpc.max_send_message_length", max_message_size),
                                       ("grpc.max_receive_message_length", max_message_size),
                                       ("grpc.so_reuseport", 0),
                                   ] + deadlines.server_options(keepalive, keepalive_timeout))
        self.port: int | None = None
        self._stopped = threading.Event()

    def add_service(self, service: ServiceDef, servicer: Any) -> "RpcServer":
        """Serve every method of `service` by the servicer's method of the same name."""
        for m in service.methods.values():
            fn = getattr(servicer, m.name, None)
            if fn is None:
                raise TypeError(f"{type(servicer).__name__} does not implement {service.name}.{m.name}")
            self._methods[m.path] = _handler(m, fn)
        return self

    def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        host = self._address.rsplit(":", 1)[0]
        if not self._address.startswith("unix:"):
            split_address(self._address, listen=True)
        try:
            if self.tls is None:
                port = self._server.add_insecure_port(self._address)
            else:
                port = self._server.add_secure_port(self._address, self.tls.grpc_server_credentials())
        except RuntimeError as exc:  # grpcio raises for an address it cannot bind
            raise RpcError(f"could not listen on {self._address}: {exc}") from None
        if not port:
            raise RpcError(f"could not listen on {self._address}")
        self._server.start()
        fork_guard.opened(self)
        self.port = port
        self.address = self._address if self._address.startswith("unix:") else f"{host}:{port}"
        log.info("rpc server listening on %s", self.address)
        return port

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop accepting calls, let running ones finish for `grace` seconds, then cancel them."""
        fork_guard.closed(self)
        if not self._stopped.is_set():
            self._stopped.set()
            if self._forked:   # the parent's server, not this process's to stop
                return
            self._server.stop(grace).wait()

    def forked_copy(self) -> None:
        """In a child forked with this server running: it serves nothing here (see fork_guard)."""
        self._forked = True

    def wait(self) -> None:
        self._server.wait_for_termination()

    def __enter__(self) -> "RpcServer":
        if self.port is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Router(grpc.GenericRpcHandler):
    def __init__(self, methods: dict[str, grpc.RpcMethodHandler]) -> None:
        self._methods = methods

    def service(self, details):
        h = self._methods.get(details.method)
        if h is None:  # unknown method: a clear INVALID_ARGUMENT instead of UNIMPLEMENTED
            return grpc.stream_stream_rpc_method_handler(_unknown(details.method))
        return h


def _unknown(path: str):
    def handler(requests, context):
        _abort(context, InvalidRequest(f"unknown method {path}"))
    return handler


def _abort(context, exc: BaseException) -> None:
    code, error_type, details = failure_status(exc, "grpc")
    if error_type:
        context.set_trailing_metadata(((ERROR_TYPE_KEY, error_type),))
    context.abort(code_of(code), details)


def _parse(method: MethodDef, raw: bytes):
    try:
        return method.request_type.FromString(raw)
    except (DecodeError, ValueError, TypeError) as exc:
        raise InvalidRequest(f"{method.path}: malformed {method.request_type.__name__}: {exc}") from None


def _ctx(context) -> CallContext:
    return CallContext(context.peer(), dict(context.invocation_metadata() or ()), context, own_call=True)


def _out(method: MethodDef, resp) -> bytes:
    if not isinstance(resp, method.response_type):
        raise TypeError(f"{method.path}: servicer returned {type(resp).__name__}, not "
                        f"{method.response_type.__name__}")
    return resp.SerializeToString()


def _handler(method: MethodDef, fn) -> grpc.RpcMethodHandler:
    """A raw-bytes handler: we parse and serialize ourselves, so bad bytes get INVALID_ARGUMENT."""
    def requests_of(raws):
        for raw in raws:
            yield _parse(method, raw)

    if method.shape == "unary":
        def unary(raw, context):
            try:
                return _out(method, fn(_parse(method, raw), _ctx(context)))
            except Exception as exc:
                _abort(context, exc)
        return grpc.unary_unary_rpc_method_handler(unary)
    if method.shape == "server_stream":
        def server_stream(raw, context):
            try:
                for resp in fn(_parse(method, raw), _ctx(context)):
                    yield _out(method, resp)
            except Exception as exc:
                _abort(context, exc)
        return grpc.unary_stream_rpc_method_handler(server_stream)
    if method.shape == "client_stream":
        def client_stream(raws, context):
            try:
                return _out(method, fn(requests_of(raws), _ctx(context)))
            except Exception as exc:
                _abort(context, exc)
        return grpc.stream_unary_rpc_method_handler(client_stream)

    def bidi(raws, context):
        try:
            for resp in fn(requests_of(raws), _ctx(context)):
                yield _out(method, resp)
        except Exception as exc:
            _abort(context, exc)
    return grpc.stream_stream_rpc_method_handler(bidi)
