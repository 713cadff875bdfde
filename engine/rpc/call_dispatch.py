"""CallDispatcher: runs a batch of unary calls that arrived together (one frame of the framed carrier).

A frame's calls are split per method in one C call (_ext/frame_codec.pyx). A servicer may take
every call of a method in a batch at once (one group append, one fsync) with one of two optional
hooks: `frames_<Method>(ids, requests, context)` gets the raw request bytes and returns the packed
reply frames and the failures; `batch_<Method>(requests, context)` gets parsed requests and returns
a response or an exception per request. Otherwise each call runs the servicer's method. A third,
`defer_<Method>(requests, context, done)`, starts the calls and answers later from any thread
(engine/rpc/deferred_calls.py), and `defer_frames_<Method>(ids, requests, context, done)` does the
same with raw bytes in and packed reply frames out; the framed server runs such batches without a
worker thread.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, NamedTuple

from google.protobuf.message import DecodeError

from logtide.engine.rpc.call_frames import REPLY_HEADER
from logtide.engine.rpc.deferred_calls import DeferredBatch, Packed
from logtide.engine.rpc.error_mapping import failure_status
from logtide.engine.rpc.service import CallContext, MethodDef
from logtide.errors import InvalidRequest

log = logging.getLogger("logtide.rpc")

# per-reply framing allowance (id, code, field tags) when checking sizes
_REPLY_OVERHEAD = 32
_RESOURCE_EXHAUSTED = 8   # gRPC's status codes, which every carrier's replies use
_pack_reply = REPLY_HEADER.pack


def packed_replies(frames: bytes, failed: list, path: str, out: "Replies | None" = None) -> "Replies":
    """A `defer_frames_<Method>` group's answer (reply frames packed in C, and (call id, exception)
    for each failed call) added to `out` (a new Replies if None)."""
    if out is None:
        out = Replies()
    if frames:
        out.frames.append(frames)
        out.size += len(frames)
    for call_id, exc in failed:
        out.error(error_reply(call_id, exc, path))
    return out


class _Unary:
    __slots__ = ("method", "fn", "batch", "frames", "defer", "defer_frames")

    def __init__(self, method: MethodDef, fn: Callable, batch: Callable | None, frames: Callable | None,
                 defer: Callable | None, defer_frames: Callable | None) -> None:
        self.method, self.fn, self.batch, self.frames = method, fn, batch, frames
        self.defer, self.defer_frames = defer, defer_frames

    @property
    def deferred(self) -> bool:
        """Its calls are started and answered later (a defer hook), with no thread waiting."""
        return self.defer is not None or self.defer_frames is not None


class CallError(NamedTuple):
    """A failed call's reply: its id and the status a unary call's status and trailer would carry."""
    id: int
    code: int
    error_type: str
    details: str


def error_reply(call_id: int, exc: BaseException, path: str) -> CallError:
    """The reply that carries a failed call's typed error."""
    return CallError(call_id, *failure_status(exc, path))


class Replies:
    """The replies of one batch: successful ones as packed frames, failed ones as CallError."""
    __slots__ = ("frames", "errors", "size")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.errors: list[CallError] = []
        self.size = 0                     # about the bytes of a ReplyBatch holding them all

    def error(self, reply: CallError) -> None:
        self.errors.append(reply)
        self.size += len(reply.details) + len(reply.error_type) + _REPLY_OVERHEAD


class CallDispatcher:
    """The unary methods of one server, and how a batch of their calls runs."""

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size
        self._methods: dict[str, _Unary] = {}

    def add(self, method: MethodDef, fn: Callable, servicer: Any) -> None:
        """Serve unary `method` by `fn` (and the servicer's batch hooks for it, if any)."""
        if method.shape == "unary":
            self._methods[method.path] = _Unary(method, fn, getattr(servicer, "batch_" + method.name, None),
                                                getattr(servicer, "frames_" + method.name, None),
                                                getattr(servicer, "defer_" + method.name, None),
                                                getattr(servicer, "defer_frames_" + method.name, None))

    def unit(self, path: str) -> _Unary | None:
        """What runs unary method `path` (None: not served here)."""
        return self._methods.get(path)

    def run_groups(self, groups: list, methods: list[str], limit: int, ctx: CallContext,
                   units: list | None = None) -> Replies:
        """The replies of the calls `groups` (split_calls' output; method indexes into `methods`,
        whose units may be given already looked up), each reply at most `limit` bytes. Calls in one
        batch were in flight together, so their order among themselves is free: those with a batch
        hook run through it together."""
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
            for call_id, req in self._parsed(u, ids, datas, out):
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

    def start_deferred(self, groups: list, units: list, ctx: CallContext, batch: DeferredBatch) -> None:
        """Start the calls `groups` (as run_groups takes them; every unit is `deferred`) and seal
        `batch`: each group's results reach it through its `done`, malformed calls at once."""
        for m, ids, datas in groups:
            u = units[m]
            if u.defer_frames is not None:
                done_frames = batch.expect_frames(u, ids)
                try:
                    u.defer_frames(ids, datas, ctx, done_frames)
                except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                    done_frames(b"", [(call_id, exc) for call_id in ids])
                continue
            now = Replies()
            b_ids, reqs = [], []
            for call_id, req in self._parsed(u, ids, datas, now):
                b_ids.append(call_id)
                reqs.append(req)
            if now.errors:
                batch.add(None, [e.id for e in now.errors], now.errors)
            if reqs:
                done = batch.expect(u, b_ids)
                try:
                    u.defer(reqs, ctx, done)
                except Exception as exc:  # noqa: BLE001 - the whole group failed alike
                    done([exc] * len(reqs))
        batch.seal()

    def deferred_replies(self, batch: DeferredBatch, limit: int) -> Replies:
        """The replies of a finished deferred batch."""
        out = Replies()
        for u, ids, results in batch.parts:
            if u is None:                  # calls refused before they started (their CallErrors)
                for e in results:
                    out.error(e)
                continue
            if results.__class__ is Packed:
                packed_replies(results.frames, results.failed, u.method.path, out)
                continue
            for call_id, res in zip(ids, results):
                self._reply(out, u, call_id, res, limit)
        return out

    @staticmethod
    def _parsed(u: _Unary, ids: list[int], datas: list, out: Replies):
        """(call id, parsed request) of each well-formed call; the malformed get their errors in out."""
        path = u.method.path
        parse = u.method.request_type.FromString
        for call_id, data in zip(ids, datas):
            try:
                req = parse(data)
            except (DecodeError, ValueError, TypeError) as exc:
                out.error(error_reply(call_id, InvalidRequest(
                    f"{path}: malformed {u.method.request_type.__name__}: {exc}"), path))
                continue
            yield call_id, req

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
            out.error(CallError(call_id, _RESOURCE_EXHAUSTED, "",
                                f"reply of {len(data) + _REPLY_OVERHEAD} bytes ({len(data)} of data and "
                                f"{_REPLY_OVERHEAD} of framing) exceeds the message limit {limit}"))
            return
        out.frames.append(_pack_reply(call_id, len(data)) + data)
        out.size += len(data) + _REPLY_OVERHEAD
