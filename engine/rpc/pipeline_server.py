"""The server side of the call pipeline: runs batches of unary calls that arrive on one stream.

Every RpcServer serves `/logtide.rpc.Pipeline/Calls` for the unary methods of its services. Each
stream has a reader thread that runs every CallBatch as it arrives (the asyncio variant hands
batches to a small pool); a servicer method `batch_<Method>(requests, context)` (optional)
takes every call of that method in a batch at once (one group append, one fsync). Replies are
written as they finish, coalesced into ReplyBatch messages.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import grpc
from google.protobuf.message import DecodeError

from logtide.engine.rpc import pipeline_pb2 as pb
from logtide.engine.rpc.error_mapping import ERROR_TYPE_KEY, status_code, type_name
from logtide.engine.rpc.service import CallContext, MethodDef
from logtide.errors import InvalidRequest, LogtideError

log = logging.getLogger("logtide.rpc")

PIPELINE_PATH = "/logtide.rpc.Pipeline/Calls"
# a synchronous gRPC server holds one worker thread per open stream (one per connected client):
# RpcServer adds this many workers for them (threads start only when used)
MAX_PIPELINE_STREAMS = 128
# replies are coalesced up to this many bytes per ReplyBatch (a larger single reply travels alone)
MAX_REPLY_BATCH_BYTES = 256 << 10
# per-reply framing allowance (id, code, field tags) when checking sizes
_REPLY_OVERHEAD = 32
_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_END = object()


class _Unary:
    __slots__ = ("method", "fn", "batch")

    def __init__(self, method: MethodDef, fn: Callable, batch: Callable | None) -> None:
        self.method, self.fn, self.batch = method, fn, batch


def error_reply(call_id: int, exc: BaseException, path: str) -> pb.PipelinedReply:
    """The reply that carries a failed call's typed error (as a unary call's status and trailer would)."""
    if isinstance(exc, LogtideError):
        return pb.PipelinedReply(id=call_id, code=status_code(exc).value[0], error_type=type_name(type(exc)),
                                 details=str(exc))
    log.error("rpc: unexpected %s in %s: %s", type(exc).__name__, path, exc, exc_info=exc)
    return pb.PipelinedReply(id=call_id, code=_INTERNAL, details=f"{type(exc).__name__}: {exc}")


class PipelineDispatcher:
    """The pipelinable (unary) methods of one server (and the pool the asyncio handler runs batches on)."""

    def __init__(self, max_message_size: int, workers: int = 8) -> None:
        self.max_message_size = max_message_size
        self._methods: dict[str, _Unary] = {}
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc-pipeline")

    def add(self, method: MethodDef, fn: Callable, servicer: Any) -> None:
        """Serve `method` on the pipeline too (unary methods only; streaming ones stay plain calls)."""
        if method.shape == "unary":
            self._methods[method.path] = _Unary(method, fn, getattr(servicer, "batch_" + method.name, None))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # --- one batch --------------------------------------------------------------------------------

    def run(self, batch: pb.CallBatch, ctx: CallContext) -> list[pb.PipelinedReply]:
        """The replies of every call in the batch. Calls in one batch were in flight together, so
        their order among themselves is free: those with a batch hook run through it together."""
        limit = min(self.max_message_size, batch.max_reply_bytes or self.max_message_size)
        replies = []
        groups: dict[str, tuple[_Unary, list, list]] = {}
        for c in batch.calls:
            u = self._methods.get(c.method)
            if u is None:
                replies.append(error_reply(c.id, InvalidRequest(f"unknown method {c.method}"), c.method))
                continue
            try:
                req = u.method.request_type.FromString(c.request)
            except (DecodeError, ValueError, TypeError) as exc:
                replies.append(error_reply(c.id, InvalidRequest(
                    f"{c.method}: malformed {u.method.request_type.__name__}: {exc}"), c.method))
                continue
            if u.batch is None:
                try:
                    out = u.fn(req, ctx)
                except Exception as exc:  # noqa: BLE001 - becomes this call's reply
                    out = exc
                replies.append(self._reply(u, c.id, out, limit))
            else:
                g = groups.get(c.method)
                if g is None:
                    g = groups[c.method] = (u, [], [])
                g[1].append(c.id)
                g[2].append(req)
        for u, ids, reqs in groups.values():
            try:
                outs = u.batch(reqs, ctx)
                if len(outs) != len(reqs):
                    raise TypeError(f"batch_{u.method.name} returned {len(outs)} results for {len(reqs)} calls")
            except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                outs = [exc] * len(reqs)
            for call_id, out in zip(ids, outs):
                replies.append(self._reply(u, call_id, out, limit))
        return replies

    def _reply(self, u: _Unary, call_id: int, out: Any, limit: int) -> pb.PipelinedReply:
        if isinstance(out, BaseException):
            return error_reply(call_id, out, u.method.path)
        if not isinstance(out, u.method.response_type):
            return error_reply(call_id, TypeError(f"{u.method.path}: servicer returned {type(out).__name__}, "
                                                  f"not {u.method.response_type.__name__}"), u.method.path)
        data = out.SerializeToString()
        if len(data) + _REPLY_OVERHEAD > limit:
            return pb.PipelinedReply(id=call_id, code=_RESOURCE_EXHAUSTED,
                                     details=f"reply of {len(data)} bytes exceeds the message limit {limit}")
        return pb.PipelinedReply(id=call_id, response=data)

    # --- one stream (the synchronous gRPC server) -------------------------------------------------

    def handler(self) -> grpc.RpcMethodHandler:
        """The raw-bytes bidi handler of PIPELINE_PATH for grpc.server."""
        return grpc.stream_stream_rpc_method_handler(self._serve)

    def _serve(self, raws, context):
        ctx = CallContext(context.peer(), dict(context.invocation_metadata() or ()), context)
        out: queue.SimpleQueue = queue.SimpleQueue()

        def reader() -> None:
            # runs each batch as it arrives: the next one queues at the client meanwhile (and its
            # appends then share the next fsync), with no hand-off to another thread
            try:
                for raw in raws:
                    try:
                        batch = pb.CallBatch.FromString(raw)
                    except (DecodeError, ValueError) as exc:
                        out.put(InvalidRequest(f"{PIPELINE_PATH}: malformed CallBatch: {exc}"))
                        return
                    out.put(self.run(batch, ctx))
            except Exception:  # noqa: BLE001 - the client went away or the server stops: end the stream
                pass
            finally:
                out.put(_END)

        threading.Thread(target=reader, name="rpc-pipeline-reader", daemon=True).start()
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, LogtideError):
                context.set_trailing_metadata(((ERROR_TYPE_KEY, type_name(type(item))),))
                context.abort(status_code(item), str(item))
            yield from reply_batches(item, out)


def reply_batches(first: list, out: queue.SimpleQueue):
    """Serialized ReplyBatch messages of `first` and of every reply list already waiting in `out`
    (an _END or error found there is put back for the caller)."""
    lists = [first]
    while True:
        try:
            more = out.get_nowait()
        except queue.Empty:
            break
        if not isinstance(more, list):
            out.put(more)
            break
        lists.append(more)
    return reply_lists(lists)


def reply_lists(lists: list[list]):
    """Serialized ReplyBatch messages holding every reply of `lists`, each at most about
    MAX_REPLY_BATCH_BYTES (a single larger reply travels alone)."""
    msg, size = pb.ReplyBatch(), 0
    for replies in lists:
        for r in replies:
            n = len(r.response) + len(r.details) + _REPLY_OVERHEAD
            if size and size + n > MAX_REPLY_BATCH_BYTES:
                yield msg.SerializeToString()
                msg, size = pb.ReplyBatch(), 0
            msg.replies.append(r)
            size += n
    if size:
        yield msg.SerializeToString()
