"""The remote log service client: the LogServiceClient interface over the RPC layer."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from logtide._ext import wal
from logtide._ext.frame_codec import decode_counter, encode_append
from logtide.engine.logservice import logservice_pb2 as pb
from logtide.engine.logservice.client import LogServiceClient, LogServiceConfig, RecordBatch
from logtide.engine.logservice.rpc_service import LOGSERVICE
from logtide.engine.logservice.log_format import MIN_MESSAGE_SIZE, USER_RECORD
from logtide.engine.logservice.record import LogRecord, data_prefix
from logtide.arg_checks import BYTES_LIKE, lsn_arg, reader_name, seconds_arg
from logtide.engine.rpc import RpcClient
from logtide.engine.rpc.transport import DEFAULT_MAX_MESSAGE_SIZE, GrpcTransport, Transport
from logtide.engine.rpc.wire_client import WireTransport
from logtide.errors import CorruptLogError, InvalidArgument, LogServiceClosed

_EMPTY = pb.Empty()
_APPEND_PATH = LOGSERVICE.method("Append").path
# a payload up to this size is encoded in C and sent as raw bytes on the framed carrier
_FAST_PAYLOAD = (32 << 10) - 32


class RemoteLogServiceClient(LogServiceClient):
    """connect_logservice("host:port"): same calls and errors as the embedded LogService, over the
    framed carrier (carrier="wire", the default) or gRPC (carrier="grpc", the interop carrier)."""

    def __init__(self, address: str | None = None, *, transport: Transport | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, timeout: float | None = None,
                 connect_timeout: float = 10.0, chunk_size: int = 4 << 20, carrier: str = "wire") -> None:
        timeout = seconds_arg("timeout", timeout)
        connect_timeout = seconds_arg("connect_timeout", connect_timeout, zero="connect at the first call")
        for name, v, least in (("max_message_size", max_message_size, MIN_MESSAGE_SIZE), ("chunk_size", chunk_size, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise InvalidArgument(f"{name} must be an int >= {least}, got {v!r}")
        if transport is None:
            if not isinstance(address, str) or ":" not in address:
                raise InvalidArgument(f"connect_logservice needs a 'host:port' address, got {address!r}")
            if carrier == "wire":
                transport = WireTransport(address, max_message_size=max_message_size, timeout=timeout,
                                          connect_timeout=connect_timeout)
            elif carrier == "grpc":   # the interop carrier: a plain gRPC call per append
                transport = GrpcTransport(address, max_message_size=max_message_size, timeout=timeout,
                                          connect_timeout=connect_timeout)
            else:
                raise InvalidArgument(f"carrier must be 'wire' or 'grpc', got {carrier!r}")
        self._rpc = RpcClient(LOGSERVICE, transport)
        # the append fast path: request encoded and reply decoded in C, no protobuf objects
        self._pipe = transport if isinstance(transport, WireTransport) else None
        self._chunk = chunk_size
        self._closed = False
        self._config: LogServiceConfig | None = None

    def _call(self, name: str, request):
        if self._closed:
            raise LogServiceClosed("the log service client is closed")
        return self._rpc.invoke(name, request)

    @staticmethod
    def _type_arg(t: object) -> int:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < 1 << 32:
            raise InvalidArgument(f"record type must be an int in [0, 2**32), got {t!r}")
        return t

    def append(self, payload: bytes | LogRecord, replica_id: int = 0, type: int = USER_RECORD) -> int:
        pipe = self._pipe
        if pipe is not None and payload.__class__ is bytes and len(payload) <= _FAST_PAYLOAD:
            data = encode_append(payload, replica_id, type)
            if data is not None:            # else: arguments the protobuf path checks (and refuses)
                if self._closed:
                    raise LogServiceClosed("the log service client is closed")
                reply = pipe.call_bytes(_APPEND_PATH, data)
                lsn = decode_counter(reply)
                return lsn if lsn >= 0 else pb.AppendResponse.FromString(reply).first_lsn
        if isinstance(payload, LogRecord):
            req = pb.AppendRequest(payloads=[bytes(payload.data)], type=self._type_arg(payload.type), raw=True)
        else:
            if not isinstance(payload, BYTES_LIKE):
                raise InvalidArgument(f"payload must be bytes-like, not {payload.__class__.__name__}")
            data_prefix(replica_id)  # validates replica_id like the embedded service
            req = pb.AppendRequest(payloads=[bytes(payload)], replica_id=replica_id, type=self._type_arg(type))
        return self._call("Append", req).first_lsn

    def append_many(self, payloads: Iterable[bytes], replica_id: int = 0, type: int = USER_RECORD) -> int:
        if isinstance(payloads, BYTES_LIKE):
            raise InvalidArgument("append_many takes a sequence of payloads, not one bytes object")
        if isinstance(payloads, np.ndarray):
            if payloads.ndim != 2 or payloads.dtype != np.uint8:
                raise InvalidArgument(f"append_many takes a 2-D uint8 array (one payload per row), "
                                      f"got {payloads.ndim}-D {payloads.dtype}")
            payloads = [r.tobytes() for r in payloads]
        payloads = list(payloads)
        if not payloads:
            raise InvalidArgument("append_many needs at least one payload")
        for i, p in enumerate(payloads):
            if not isinstance(p, BYTES_LIKE):
                raise InvalidArgument(f"payload {i} must be bytes-like, not {p.__class__.__name__}")
        data_prefix(replica_id)
        if len(payloads) == 1:  # the server tells one payload from many by count
            return self.append(payloads[0], replica_id, type)
        req = pb.AppendRequest(payloads=[bytes(p) for p in payloads], replica_id=replica_id,
                               type=self._type_arg(type))
        return self._call("Append", req).first_lsn

    def _chunks(self, first_lsn: int, max_size: int):
        lsn_arg("first_lsn", first_lsn)
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 0:
            raise InvalidArgument(f"max_size must be an int >= 0, got {max_size!r}")
        if self._closed:
            raise LogServiceClosed("the log service client is closed")
        req = pb.ReadRequest(first_lsn=first_lsn, max_size=min(max_size, (1 << 64) - 1), chunk_size=self._chunk)
        return list(self._rpc.invoke("Read", req))

    def _frames(self, first_lsn: int, max_size: int):
        """The read's frames in one buffer, verified (CRC, LSN sequence) as they arrived."""
        chunks = self._chunks(first_lsn, max_size)
        buf = chunks[0].frames if len(chunks) == 1 else b"".join(c.frames for c in chunks)
        count = sum(c.count for c in chunks)
        starts, types, lengths, end, status = wal.scan(buf, 0, first_lsn, count)
        if len(starts) != count or end != len(buf):
            raise CorruptLogError(f"read({first_lsn}): frame {len(starts)} of {count} received from the server "
                                  f"failed verification ({wal.STATUS_NAMES[status]}) at offset {end}",
                                  segment="<wire>", offset=end)
        next_lsn = chunks[-1].next_lsn if chunks and chunks[-1].last else first_lsn
        return buf, starts, types, lengths, next_lsn

    def read(self, first_lsn: int, max_size: int) -> tuple[list[LogRecord], int]:
        buf, starts, types, lengths, next_lsn = self._frames(first_lsn, max_size)
        return wal.decode(buf, starts, types, lengths, first_lsn, LogRecord), next_lsn

    def read_batch(self, first_lsn: int, max_size: int) -> RecordBatch:
        buf, starts, types, lengths, next_lsn = self._frames(first_lsn, max_size)
        return RecordBatch(first_lsn, types, starts + np.uint64(wal.HEADER_SIZE), lengths, buf, next_lsn)

    def truncate(self, lsn: int) -> None:
        self._call("Truncate", pb.LsnRequest(lsn=lsn_arg("lsn", lsn)))

    def get_truncated_lsn(self) -> int:
        return self._call("GetTruncatedLsn", _EMPTY).lsn

    def get_latest_lsn(self) -> int:
        return self._call("GetLatestLsn", _EMPTY).lsn

    def get_first_lsn(self) -> int:
        return self._call("GetFirstLsn", _EMPTY).lsn

    def get_tso_timestamp(self, count: int) -> int:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or count > 1 << 32:
            raise InvalidArgument(f"get_tso_timestamp(count): count must be an int in [1, 2**32], got {count!r}")
        return self._call("GetTsoTimestamp", pb.TsoRequest(count=count)).first

    def config(self) -> LogServiceConfig:
        r = self._call("GetConfig", _EMPTY)
        return LogServiceConfig(r.dir, r.fsync, r.segment_size, r.max_record_size, r.truncation_interval)

    def register_reader(self, name: str, replayed_lsn: int = 0) -> None:
        self._call("RegisterReader", pb.ReaderRequest(name=reader_name(name),
                                                      lsn=lsn_arg("replayed_lsn", replayed_lsn)))

    def report_replayed(self, name: str, lsn: int) -> None:
        self._call("ReportReplayed", pb.ReaderRequest(name=reader_name(name), lsn=lsn_arg("lsn", lsn)))

    def unregister_reader(self, name: str) -> None:
        self._call("UnregisterReader", pb.ReaderRequest(name=reader_name(name)))

    def readers(self) -> dict[str, int]:
        return dict(self._call("ListReaders", _EMPTY).readers)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._rpc.close()
