"""The server side of the call pipeline: runs batches of unary calls that arrive on one stream.

Every RpcServer serves `/logtide.rpc.Pipeline/Calls` for the unary methods of its services. Each
stream has a reader thread that runs every CallBatch as it arrives (the asyncio variant hands
batches to a small pool). A batch's frames are split per method in one C call
(_ext/frame_codec.pyx). A servicer may take every call of a method in a batch at once (one group
append, one fsync) with one of two optional hooks: `frames_<Method>(ids, requests, context)` gets
the raw request bytes and returns the packed reply frames and the failures;
`batch_<Method>(requests, context)` gets parsed requests and returns a response or an exception
per request. Replies are written as they finish, coalesced into ReplyBatch messages. With
`inline` set, the stream's own worker thread runs each batch and writes its replies itself.
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
from logtide._ext.frame_codec import split_calls
from logtide.engine.rpc.call_frames import REPLY_HEADER
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
_pack_reply = REPLY_HEADER.pack


class _Unary:
    __slots__ = ("method", "fn", "batch", "frames")

    def __init__(self, method: MethodDef, fn: Callable, batch: Callable | None, frames: Callable | None) -> None:
        self.method, self.fn, self.batch, self.frames = method, fn, batch, frames


def error_reply(call_id: int, exc: BaseException, path: str) -> pb.PipelinedReply:
    """The reply that carries a failed call's typed error (as a unary call's status and trailer would)."""
    if isinstance(exc, LogtideError):
        return pb.PipelinedReply(id=call_id, code=status_code(exc).value[0], error_type=type_name(type(exc)),
                                 details=str(exc))
    log.error("rpc: unexpected %s in %s: %s", type(exc).__name__, path, exc, exc_info=exc)
    return pb.PipelinedReply(id=call_id, code=_INTERNAL, details=f"{type(exc).__name__}: {exc}")


class Replies:
    """The replies of one batch: successful ones as packed frames, failed ones as PipelinedReply."""
    __slots__ = ("frames", "errors", "size")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.errors: list[pb.PipelinedReply] = []
        self.size = 0                     # about the bytes of a ReplyBatch holding them all

    def error(self, reply: pb.PipelinedReply) -> None:
        self.errors.append(reply)
        self.size += len(reply.details) + len(reply.error_type) + _REPLY_OVERHEAD


class PipelineDispatcher:
    """The pipelinable (unary) methods of one server (and the pool the asyncio handler runs batches on)."""

    def __init__(self, max_message_size: int, workers: int = 8) -> None:
        self.max_message_size = max_message_size
        self._methods: dict[str, _Unary] = {}
        # inline: the stream's own worker reads, runs and answers each batch (no reader thread and no
        # hand-off per batch); for servers whose clients keep about one call in flight per stream
        self.inline = False
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc-pipeline")

    def add(self, method: MethodDef, fn: Callable, servicer: Any) -> None:
        """Serve `method` on the pipeline too (unary methods only; streaming ones stay plain calls)."""
        if method.shape == "unary":
            self._methods[method.path] = _Unary(method, fn, getattr(servicer, "batch_" + method.name, None),
                                                getattr(servicer, "frames_" + method.name, None))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # --- one batch --------------------------------------------------------------------------------

    def run(self, batch: pb.CallBatch, ctx: CallContext) -> Replies:
        """The replies of every call in the batch. Calls in one batch were in flight together, so
        their order among themselves is free: those with a batch hook run through it together.
        MalformedFrames when the batch's frames do not split into whole frames."""
        limit = min(self.max_message_size, batch.max_reply_bytes or self.max_message_size)
        return self.run_groups(split_calls(batch.frames), list(batch.methods), limit, ctx)

    def unit(self, path: str) -> _Unary | None:
        """What runs unary method `path` (None: not served here)."""
        return self._methods.get(path)

    def run_groups(self, groups: list, methods: list[str], limit: int, ctx: CallContext,
                   units: list | None = None) -> Replies:
        """The replies of the calls `groups` (split_calls' output; method indexes into `methods`,
        whose units may be given already looked up), each reply at most `limit` bytes."""
        if units is None:
            units = [self._methods.get(path) for path in methods]
        out = Replies()
        for m, ids, datas in groups:
            u = units[m] if m < len(units) else None
            if u is None:
                path = methods[m] if m < len(units) else f"#{m}"
                for call_id in ids:
                    out.error(error_reply(call_id, InvalidRequest(f"unknown method {path}"), path))
                continue
            path = u.method.path
            if u.frames is not None:
                try:
                    frames, failed = u.frames(ids, datas, ctx)
                except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                    frames, failed = b"", [(call_id, exc) for call_id in ids]
                if frames:
                    out.frames.append(frames)
                    out.size += len(frames)
                for call_id, exc in failed:
                    out.error(error_reply(call_id, exc, path))
                continue
            b_ids, reqs = [], []
            parse = u.method.request_type.FromString
            for call_id, data in zip(ids, datas):
                try:
                    req = parse(data)
                except (DecodeError, ValueError, TypeError) as exc:
                    out.error(error_reply(call_id, InvalidRequest(
                        f"{path}: malformed {u.method.request_type.__name__}: {exc}"), path))
                    continue
                if u.batch is None:
                    try:
                        res = u.fn(req, ctx)
                    except Exception as exc:  # noqa: BLE001 - becomes this call's reply
                        res = exc
                    self._reply(out, u, call_id, res, limit)
                else:
                    b_ids.append(call_id)
                    reqs.append(req)
            if reqs:
                try:
                    results = u.batch(reqs, ctx)
                    if len(results) != len(reqs):
                        raise TypeError(f"batch_{u.method.name} returned {len(results)} results for {len(reqs)} calls")
                except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                    results = [exc] * len(reqs)
                for call_id, res in zip(b_ids, results):
                    self._reply(out, u, call_id, res, limit)
        return out

    @staticmethod
    def _reply(out: Replies, u: _Unary, call_id: int, res: Any, limit: int) -> None:
        if res.__class__ is not u.method.response_type:
            if isinstance(res, BaseException):
                out.error(error_reply(call_id, res, u.method.path))
                return
            if not isinstance(res, u.method.response_type):
                out.error(error_reply(call_id, TypeError(
                    f"{u.method.path}: servicer returned {type(res).__name__}, not "
                    f"{u.method.response_type.__name__}"), u.method.path))
                return
        data = res.SerializeToString()
        if len(data) + _REPLY_OVERHEAD > limit:
            out.error(pb.PipelinedReply(
                id=call_id, code=_RESOURCE_EXHAUSTED,
                details=f"reply of {len(data)} bytes exceeds the message limit {limit}"))
            return
        out.frames.append(_pack_reply(call_id, len(data)) + data)
        out.size += len(data) + _REPLY_OVERHEAD

    # --- one stream (the synchronous gRPC server) -------------------------------------------------

    def handler(self) -> grpc.RpcMethodHandler:
        """The raw-bytes bidi handler of PIPELINE_PATH for grpc.server."""
        return grpc.stream_stream_rpc_method_handler(self._serve)

    def _serve(self, raws, context):
        ctx = CallContext(context.peer(), dict(context.invocation_metadata() or ()), context)
        if self.inline:
            yield from self._serve_inline(raws, context, ctx)
            return
        out: queue.SimpleQueue = queue.SimpleQueue()

        def reader() -> None:
            # runs each batch as it arrives: the next one queues at the client meanwhile (and its
            # appends then share the next fsync), with no hand-off to another thread
            try:
                for raw in raws:
                    try:
                        replies = self.run(pb.CallBatch.FromString(raw), ctx)
                    except (DecodeError, ValueError) as exc:   # MalformedFrames too
                        out.put(InvalidRequest(f"{PIPELINE_PATH}: malformed CallBatch: {exc}"))
                        return
                    out.put(replies)
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


    def _serve_inline(self, raws, context, ctx):
        """One thread per stream: each batch is run, then answered, before the next is read (the
        next one waits in gRPC's buffers meanwhile). Saves two thread hand-offs per batch."""
        try:
            for raw in raws:
                try:
                    replies = self.run(pb.CallBatch.FromString(raw), ctx)
                except (DecodeError, ValueError) as exc:   # MalformedFrames too
                    err = InvalidRequest(f"{PIPELINE_PATH}: malformed CallBatch: {exc}")
                    context.set_trailing_metadata(((ERROR_TYPE_KEY, type_name(type(err))),))
                    context.abort(status_code(err), str(err))
                yield from reply_lists([replies])
        except grpc.RpcError:  # the client went away or the server stops: end the stream
            return


def reply_batches(first: Replies, out: queue.SimpleQueue):
    """Serialized ReplyBatch messages of `first` and of every batch's replies already waiting in
    `out` (an _END or error found there is put back for the caller)."""
    lists = [first]
    while True:
        try:
            more = out.get_nowait()
        except queue.Empty:
            break
        if more.__class__ is not Replies:
            out.put(more)
            break
        lists.append(more)
    return reply_lists(lists)


def reply_lists(lists: list[Replies]):
    """Serialized ReplyBatch messages holding every reply of `lists`, each at most about
    MAX_REPLY_BATCH_BYTES (a single larger reply travels alone)."""
    if len(lists) == 1 and lists[0].size <= MAX_REPLY_BATCH_BYTES:   # the common case: one message
        r = lists[0]
        yield pb.ReplyBatch(frames=b"".join(r.frames), errors=r.errors).SerializeToString()
        return
    frames: list[bytes] = []
    errors: list = []
    size = 0
    for r in lists:
        for f in r.frames:
            if size and size + len(f) > MAX_REPLY_BATCH_BYTES:
                yield pb.ReplyBatch(frames=b"".join(frames), errors=errors).SerializeToString()
                frames, errors, size = [], [], 0
            frames.append(f)
            size += len(f)
        for e in r.errors:
            n = len(e.details) + _REPLY_OVERHEAD
            if size and size + n > MAX_REPLY_BATCH_BYTES:
                yield pb.ReplyBatch(frames=b"".join(frames), errors=errors).SerializeToString()
                frames, errors, size = [], [], 0
            errors.append(e)
            size += n
    if frames or errors:
        yield pb.ReplyBatch(frames=b"".join(frames), errors=errors).SerializeToString()
