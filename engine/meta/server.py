"""The meta-service gRPC server: Write / Read / Watch over canonical JSON, watch as a server stream."""
from __future__ import annotations

import json
import threading
from concurrent import futures
from typing import Optional

import grpc

from logtide.engine.meta import grpc_format as G
from logtide.engine.meta.command import check_key
from logtide.engine.meta.log_entry import command_from_obj, dumps
from logtide.engine.meta.service import MetaService
from logtide.engine.meta.txn_reply import TxnReply
from logtide.engine.meta.wire import event_to_obj, seqv_to_obj, txn_reply_to_obj, upsert_reply_to_obj
from logtide.errors import CorruptionError, MetaClosedError, MetaError, MetaInvalidArgument
from logtide.errors import MetaUnavailableError


def _parse(request: bytes) -> dict:
    try:
        obj = json.loads(request.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MetaInvalidArgument(f"request is not canonical JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MetaInvalidArgument("request must be a JSON object")
    return obj


class MetaServer:
    """Serves one MetaService on a gRPC address; `port` is the bound port (listen on :0 for a free one).

    A thread-pool gRPC server: reads run in the calling worker (they are in-memory), writes block
    their worker until durable, so concurrent writers share the log's group commit.
    """

    def __init__(self, service: MetaService, listen: str = "127.0.0.1:0", max_workers: int = 64):
        self.service = service
        self._stopped = threading.Event()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="meta-rpc"),
            options=[("grpc.max_receive_message_length", G.MAX_MESSAGE_BYTES),
                     ("grpc.max_send_message_length", G.MAX_MESSAGE_BYTES),
                     ("grpc.so_reuseport", 0)])
        handlers = {
            G.METHOD_WRITE: grpc.unary_unary_rpc_method_handler(self._write),
            G.METHOD_READ: grpc.unary_unary_rpc_method_handler(self._read),
            G.METHOD_WATCH: grpc.unary_stream_rpc_method_handler(self._watch),
        }
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(G.SERVICE, handlers),))
        self.port = self._server.add_insecure_port(listen)
        if self.port == 0:
            raise MetaUnavailableError(f"cannot listen on {listen}")
        host = listen.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"
        if service.leader is None:
            service.leader = self.address   # single node: this server is the leader

    def start(self) -> "MetaServer":
        self._server.start()
        return self

    def stop(self, grace: Optional[float] = 1.0) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._server.stop(grace).wait()

    def wait(self) -> None:
        self._stopped.wait()

    # ------------------------------------------------------------------ handlers
    @staticmethod
    def _status(exc: BaseException):
        """Our typed errors as gRPC status codes; a bad request never takes the server down."""
        if isinstance(exc, MetaInvalidArgument):
            return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        if isinstance(exc, MetaClosedError):
            return grpc.StatusCode.UNAVAILABLE, str(exc)
        if isinstance(exc, (CorruptionError, MetaError)):
            return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (KeyError, TypeError, ValueError, AttributeError)):
            return grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {type(exc).__name__}: {exc}"
        return None

    def _guard(self, context, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:
            st = self._status(exc)
            if st is None:
                raise
            context.abort(*st)

    def _do_write(self, request: bytes) -> bytes:
        obj = _parse(request)
        if set(obj) != {"cmd"}:
            raise MetaInvalidArgument("a write request is {\"cmd\": command}")
        reply = self.service.apply_command(command_from_obj(obj["cmd"]))
        if isinstance(reply, TxnReply):
            return dumps({"leader": self.service.leader, "txn": txn_reply_to_obj(reply)})
        return dumps({"leader": self.service.leader, "upsert": upsert_reply_to_obj(reply)})

    def _write(self, request: bytes, context) -> bytes:
        return self._guard(context, self._do_write, request)

    def _do_read(self, request: bytes) -> bytes:
        obj = _parse(request)
        if len(obj) != 1:
            raise MetaInvalidArgument("a read request has exactly one of get, mget, list, seq")
        (kind, arg), = obj.items()
        ms = self.service
        if kind == "get":
            result = seqv_to_obj(ms.get(arg))
        elif kind == "mget":
            result = [seqv_to_obj(v) for v in ms.mget(arg)]
        elif kind == "list":
            if not isinstance(arg, dict):
                raise MetaInvalidArgument("list takes {\"prefix\", \"limit\"}")
            result = [[k, seqv_to_obj(v)] for k, v in ms.list(arg.get("prefix"), arg.get("limit"))]
        elif kind == "seq":
            result = ms.seq
        else:
            raise MetaInvalidArgument(f"unknown read {kind!r}")
        return dumps({"leader": ms.leader, "result": result})

    def _read(self, request: bytes, context) -> bytes:
        return self._guard(context, self._do_read, request)

    def _open_watch(self, request: bytes):
        obj = _parse(request)
        return self.service.watch(check_key(obj.get("key")), obj.get("key_end"), obj.get("filter", "all"),
                                  obj.get("initial_flush", False))

    def _watch(self, request: bytes, context):
        w = self._guard(context, self._open_watch, request)
        context.add_callback(w.close)   # the client went away: stop watching
        leader = self.service.leader
        try:
            while context.is_active() and not self._stopped.is_set():
                try:
                    ev = w.get(timeout=G.WATCH_POLL_S)
                except MetaClosedError:
                    return
                if ev is not None:
                    yield dumps({"leader": leader, "event": event_to_obj(ev)})
        finally:
            w.close()
