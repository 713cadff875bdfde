"""The log service over the RPC layer: its servicer and a server (framed carrier, optionally gRPC too)."""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from google.protobuf.message import DecodeError

from logtide._ext.frame_codec import decode_appends, pack_counter_replies, pack_replies

from logtide.engine.logservice import logservice_pb2 as pb
from logtide.engine.logservice.log_format import HEADER_SIZE, MIN_MESSAGE_SIZE
from logtide.engine.logservice.record import LogRecord, data_prefix
from logtide.engine.logservice.service import LogService
from logtide.engine.rpc import RpcServer, ServiceDef
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import InvalidArgument, InvalidRequest

log = logging.getLogger("logtide.logservice")

LOGSERVICE = ServiceDef.from_proto(pb, "LogService")
DEFAULT_CHUNK_SIZE = 1 << 20
# a user record's data prefix: payloads within max_record_size minus this never fail a group append
_PREFIX_SIZE = len(data_prefix(0))
_EMPTY = pb.Empty()


def _lsn_replies(ids: list, lsns: list) -> bytes:
    """The AppendResponse reply frames of call ids[k] appended at lsns[k]: one C call per run of
    consecutive LSNs (all of them, unless another appender's records came in between)."""
    n = len(ids)
    if lsns[-1] - lsns[0] == n - 1:
        return pack_counter_replies(ids, lsns[0])
    parts, start = [], 0
    for k in range(1, n + 1):
        if k == n or lsns[k] != lsns[k - 1] + 1:
            parts.append(pack_counter_replies(ids[start:k], lsns[start]))
            start = k
    return b"".join(parts)


class _Parts:
    """Joins the `done(frames, failed)` answers of `n` parts of one group into one call of `done`."""

    def __init__(self, n: int, done) -> None:
        self._left, self._done = n, done
        self._frames: list = []
        self._failed: list = []
        self._lock = threading.Lock()

    def add(self, frames: bytes, failed: list) -> None:
        with self._lock:
            if frames:
                self._frames.append(frames)
            self._failed += failed
            self._left -= 1
            if self._left:
                return
        self._done(b"".join(self._frames), self._failed)


class LogServiceServicer:
    """Serves one LogService; every method maps 1:1 onto the client API."""

    def __init__(self, svc: LogService, max_message_size: int) -> None:
        self.svc = svc
        self.max_message_size = max_message_size
        # payloads up to this size never fail a group append for their size
        self._max_payload = svc.config().max_record_size - _PREFIX_SIZE
        self._pool: ThreadPoolExecutor | None = None     # the unusual deferred appends (made when needed)
        self._pool_lock = threading.Lock()
        if not callable(getattr(svc, "queue_group", None)):
            # a log that cannot queue appends without waiting (a client of another log service):
            # its batches take the workers' path (frames_Append)
            self.defer_frames_Append = None

    def Append(self, req: pb.AppendRequest, ctx) -> pb.AppendResponse:
        if req.raw:
            if len(req.payloads) != 1:
                raise InvalidArgument("a raw append carries exactly one record's data")
            return pb.AppendResponse(first_lsn=self.svc.append(LogRecord(0, req.type, req.payloads[0])))
        if len(req.payloads) == 1:
            return pb.AppendResponse(first_lsn=self.svc.append(req.payloads[0], req.replica_id, req.type))
        return pb.AppendResponse(first_lsn=self.svc.append_many(list(req.payloads), req.replica_id, req.type))

    def frames_Append(self, ids: list, requests: list, ctx) -> tuple[bytes, list]:
        """The pipeline's batch of Append calls, as raw request bytes: the one-payload appends
        (decoded in C) of each record type become one group (consecutive LSNs, one fsync), answered
        by reply frames packed in C; each call still gets its own LSN or error. Raw, multi-payload,
        oversize and unusual requests run one by one through protobuf, as unary calls would.
        Returns (reply frames, [(id, error)])."""
        f_ids, payloads, rids, types, slow = decode_appends(ids, requests, self._max_payload)
        parts: list[bytes] = []
        failed: list = []
        if f_ids:
            if types.count(types[0]) == len(types):
                self._group(f_ids, payloads, rids, types[0], parts, failed)
            else:
                by_type: dict[int, list[int]] = {}
                for k, t in enumerate(types):
                    by_type.setdefault(t, []).append(k)
                for t, ks in by_type.items():
                    self._group([f_ids[k] for k in ks], [payloads[k] for k in ks], [rids[k] for k in ks],
                                t, parts, failed)
        if slow:
            s_ids, s_res = [], []
            for k in slow:
                try:
                    req = pb.AppendRequest.FromString(requests[k])
                except (DecodeError, ValueError, TypeError) as exc:
                    failed.append((ids[k], InvalidRequest(f"Append: malformed AppendRequest: {exc}")))
                    continue
                res = self._one(req)
                if isinstance(res, BaseException):
                    failed.append((ids[k], res))
                else:
                    s_ids.append(ids[k])
                    s_res.append(res.SerializeToString())
            parts.append(pack_replies(s_ids, s_res))
        return (parts[0] if len(parts) == 1 else b"".join(parts)), failed

    def defer_frames_Append(self, ids: list, requests: list, ctx, done) -> None:
        """The framed server's batch of Append calls, answered without a thread waiting for them:
        the one-payload appends (decoded in C) are queued on the log's group committer now and
        answered by `done(reply frames, [(id, error)])` once they are durable: on the server's event
        loop, which the log's flusher wakes (LoopDurability), or else from the durability watcher. The others (raw, multi-payload, oversize, unusual) run through frames_Append
        on a helper thread, since they wait for their own append."""
        f_ids, payloads, rids, types, slow = decode_appends(ids, requests, self._max_payload)
        if slow:
            if not f_ids:
                self._slow_pool().submit(self._answer_frames, ids, requests, done)
                return
            part = _Parts(2, done)
            self._slow_pool().submit(self._answer_frames, [ids[k] for k in slow], [requests[k] for k in slow],
                                     part.add)
            done = part.add
        failed: list = []
        queued_ids: list = []
        lsns: list = []
        try:
            loop = asyncio.get_running_loop()     # the framed server's: it commits and is told itself
        except RuntimeError:
            loop = None
        if types.count(types[0]) == len(types):
            groups = [(types[0], f_ids, payloads, rids)]
        else:
            by_type: dict[int, list[int]] = {}
            for k, t in enumerate(types):
                by_type.setdefault(t, []).append(k)
            groups = [(t, [f_ids[k] for k in ks], [payloads[k] for k in ks], [rids[k] for k in ks])
                      for t, ks in by_type.items()]
        for rtype, g_ids, g_payloads, g_rids in groups:
            try:
                lsns += self.svc.queue_group(g_payloads, g_rids, rtype, loop)
            except Exception as exc:  # noqa: BLE001 - nothing of the group was queued
                failed.extend((i, exc) for i in g_ids)
                continue
            queued_ids += g_ids
        if not lsns:
            done(b"", failed)
            return

        def durable(err: BaseException | None) -> None:
            if err is not None:
                done(b"", failed + [(i, err) for i in queued_ids])
            else:
                done(_lsn_replies(queued_ids, lsns), failed)
        self.svc.when_durable(max(lsns), durable, loop)

    def _answer_frames(self, ids: list, requests: list, done) -> None:
        try:
            frames, failed = self.frames_Append(ids, requests, None)
        except Exception as exc:  # noqa: BLE001 - the whole group failed alike
            frames, failed = b"", [(i, exc) for i in ids]
        done(frames, failed)

    def _slow_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="logservice-slow-append")
            return self._pool

    def close(self) -> None:
        """Stop the helper thread of the unusual deferred appends (once the server stopped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _group(self, ids: list, payloads: list, rids: list, rtype: int, parts: list, failed: list) -> None:
        try:
            first = self.svc.append_group(payloads, rids, rtype)
        except Exception as exc:  # noqa: BLE001 - nothing of the group was acknowledged
            failed.extend((i, exc) for i in ids)
            return
        parts.append(pack_counter_replies(ids, first))

    def _one(self, req: pb.AppendRequest):
        try:
            return self.Append(req, None)
        except Exception as exc:  # noqa: BLE001 - this call's reply
            return exc

    def Read(self, req: pb.ReadRequest, ctx):
        batch = self.svc.read_batch(req.first_lsn, req.max_size)
        chunk = min(req.chunk_size or DEFAULT_CHUNK_SIZE, self.max_message_size // 2)
        n, buf = len(batch), batch.buf
        starts = batch.offsets - np.uint64(HEADER_SIZE)      # frame starts within buf
        ends = starts + np.uint64(HEADER_SIZE) + batch.lengths
        k = 0
        while True:
            j = max(k + 1, int(np.searchsorted(ends, int(starts[k]) + chunk, "right"))) if n else 0
            last = j >= n
            frames = buf[int(starts[k]):int(ends[j - 1])] if n else b""
            yield pb.ReadChunk(first_lsn=batch.first_lsn + k, count=j - k, frames=frames,
                               next_lsn=batch.next_lsn if last else 0, last=last)
            if last or not ctx.is_active():
                return
            k = j

    def Truncate(self, req: pb.LsnRequest, ctx) -> pb.Empty:
        self.svc.truncate(req.lsn)
        return _EMPTY

    def GetTruncatedLsn(self, req, ctx) -> pb.LsnResponse:
        return pb.LsnResponse(lsn=self.svc.get_truncated_lsn())

    def GetLatestLsn(self, req, ctx) -> pb.LsnResponse:
        return pb.LsnResponse(lsn=self.svc.get_latest_lsn())

    def GetFirstLsn(self, req, ctx) -> pb.LsnResponse:
        return pb.LsnResponse(lsn=self.svc.get_first_lsn())

    def GetTsoTimestamp(self, req: pb.TsoRequest, ctx) -> pb.TsoResponse:
        return pb.TsoResponse(first=self.svc.get_tso_timestamp(req.count))

    def GetConfig(self, req, ctx) -> pb.ConfigResponse:
        c = self.svc.config()
        return pb.ConfigResponse(dir=c.dir, fsync=c.fsync, segment_size=c.segment_size,
                                 max_record_size=c.max_record_size, truncation_interval=c.truncation_interval,
                                 max_message_size=self.max_message_size)

    def RegisterReader(self, req: pb.ReaderRequest, ctx) -> pb.Empty:
        self.svc.register_reader(req.name, req.lsn)
        return _EMPTY

    def ReportReplayed(self, req: pb.ReaderRequest, ctx) -> pb.Empty:
        self.svc.report_replayed(req.name, req.lsn)
        return _EMPTY

    def UnregisterReader(self, req: pb.ReaderRequest, ctx) -> pb.Empty:
        self.svc.unregister_reader(req.name)
        return _EMPTY

    def ListReaders(self, req, ctx) -> pb.ReadersResponse:
        return pb.ReadersResponse(readers=self.svc.readers())


def _check_message_size(size: int | None) -> None:
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < MIN_MESSAGE_SIZE):
        raise InvalidArgument(f"max_message_size must be an int >= {MIN_MESSAGE_SIZE} bytes, got {size!r}")


class LogServiceServer:
    """A LogService on a directory, served over the framed carrier on `listen` (port 0 picks one: see
    `.port`, `.address`) and, when `grpc_listen` is given, over gRPC there too (`.grpc_address`)."""

    def __init__(self, svc: LogService, listen: str = "127.0.0.1:0", *, max_message_size: int | None = None,
                 max_workers: int = 32, own_service: bool = False, grpc_listen: str | None = None) -> None:
        cfg = svc.config()
        _check_message_size(max_message_size)
        # room for the largest record plus framing; a bigger message is refused by the carrier itself
        self.max_message_size = max_message_size or max(4 << 20, cfg.max_record_size + (1 << 20))
        self.svc = svc
        self._own = own_service
        servicer = self.servicer = LogServiceServicer(svc, self.max_message_size)
        self.wire = WireServer(listen, max_message_size=self.max_message_size)
        self.wire.add_service(LOGSERVICE, servicer)
        self.wire.add_service(DIAGNOSTICS, DiagnosticsServicer("logservice"))
        self.rpc: RpcServer | None = None
        self.grpc_address: str | None = None
        try:
            self.port = self.wire.start()
            self.address = self.wire.address
            if grpc_listen is not None:
                self.rpc = RpcServer(grpc_listen, max_message_size=self.max_message_size, max_workers=max_workers)
                self.rpc.add_service(LOGSERVICE, servicer)
                self.rpc.add_service(DIAGNOSTICS, DiagnosticsServicer("logservice"))
                self.rpc.start()
                self.grpc_address = self.rpc.address
        except BaseException:
            self.wire.stop(0)
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, listen: str = "127.0.0.1:0", *, max_message_size: int | None = None,
             grpc_listen: str | None = None, **options) -> "LogServiceServer":
        """Open the log in `path` and serve it; stop() closes both."""
        _check_message_size(max_message_size)     # before the log is opened (or created)
        svc = LogService.open(path, **options)
        try:
            return cls(svc, listen, max_message_size=max_message_size, own_service=True, grpc_listen=grpc_listen)
        except BaseException:
            svc.close()
            raise

    def stop(self, grace: float | None = 1.0) -> None:
        try:
            if self.rpc is not None:
                self.rpc.stop(grace)
            self.wire.stop(grace)
            self.servicer.close()
        finally:
            if self._own:
                self.svc.close()

    def __enter__(self) -> "LogServiceServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
