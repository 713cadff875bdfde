"""connect_meta(addr): a gRPC client with the embedded MetaService's API."""
from __future__ import annotations

import json
import queue
import threading
from typing import List, Optional, Sequence, Tuple

import grpc

from logtide.engine.meta import grpc_format as G
from logtide.engine.meta.command import TxnCmd, UpsertCmd, check_key, check_match_seq, make_spec
from logtide.engine.meta.log_entry import command_to_obj, dumps
from logtide.engine.meta.match_seq import ANY, MatchSeq
from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.txn_reply import TxnReply
from logtide.engine.meta.watch import WatchEvent, check_filter
from logtide.engine.meta.wire import event_from_obj, seqv_from_obj, txn_reply_from_obj, upsert_reply_from_obj
from logtide.errors import MetaClosedError, MetaError, MetaInvalidArgument, MetaUnavailableError


def _raise(exc: grpc.RpcError):
    code = exc.code() if hasattr(exc, "code") else None
    msg = exc.details() if hasattr(exc, "details") else str(exc)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
        raise MetaInvalidArgument(msg) from None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise MetaUnavailableError(msg) from None
    if code == grpc.StatusCode.CANCELLED:
        raise MetaClosedError(msg) from None
    raise MetaError(f"{code}: {msg}") from None


class RemoteWatcher:
    """A watch stream from the server: iterate it, poll with get(timeout), close() cancels it."""

    _END = object()

    def __init__(self, call):
        self._call = call
        self._q: "queue.SimpleQueue" = queue.SimpleQueue()
        self._closed = False
        self._reader = threading.Thread(target=self._pump, daemon=True, name="meta-watch")
        self._reader.start()

    def _pump(self) -> None:
        try:
            for raw in self._call:
                self._q.put(event_from_obj(json.loads(raw)["event"]))
            self._q.put(self._END)
        except grpc.RpcError as exc:
            self._q.put(exc)

    def get(self, timeout: Optional[float] = None) -> Optional[WatchEvent]:
        """The next event; None after `timeout` seconds with nothing; MetaClosedError at end of stream."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, WatchEvent):
            return item
        self._q.put(item)           # keep the end visible to later calls
        if item is self._END or self._closed:
            raise MetaClosedError("the watch stream ended")
        _raise(item)

    def __iter__(self):
        while True:
            try:
                yield self.get()
            except MetaClosedError:
                return

    def close(self) -> None:
        self._closed = True
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MetaClient:
    """The embedded MetaService's API over gRPC. `leader` is the leader address the last reply named."""

    def __init__(self, addr: str, timeout: float = 30.0):
        self.addr = addr
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            addr, options=[("grpc.max_receive_message_length", G.MAX_MESSAGE_BYTES),
                           ("grpc.max_send_message_length", G.MAX_MESSAGE_BYTES)])
        self._write = self._channel.unary_unary(G.path(G.METHOD_WRITE))
        self._read_rpc = self._channel.unary_unary(G.path(G.METHOD_READ))
        self._watch = self._channel.unary_stream(G.path(G.METHOD_WATCH))
        self.leader: Optional[str] = None

    def _rpc(self, fn, obj) -> dict:
        try:
            raw = fn(dumps(obj), timeout=self.timeout)
        except grpc.RpcError as exc:
            _raise(exc)
        reply = json.loads(raw)
        self.leader = reply.get("leader")
        return reply

    # ------------------------------------------------------------------ writes
    def _propose(self, cmd):
        reply = self._rpc(self._write, {"cmd": command_to_obj(cmd)})
        if "txn" in reply:
            return txn_reply_from_obj(reply["txn"])
        return upsert_reply_from_obj(reply["upsert"])

    def upsert(self, key: str, value, match_seq: MatchSeq = ANY, ttl_ms: Optional[int] = None,
               expire_at: Optional[int] = None) -> Tuple[Optional[SeqV], Optional[SeqV]]:
        return self._propose(UpsertCmd(key, value, check_match_seq(match_seq), make_spec(ttl_ms, expire_at)))

    def txn(self, conditions=(), if_then=(), else_then=(), branches=None, operations=None) -> TxnReply:
        if branches is not None and operations is not None:
            raise MetaInvalidArgument("give branches or operations (its alias), not both")
        br = branches if branches is not None else operations
        return self._propose(TxnCmd(conditions or (), if_then or (), else_then or (), br or ()))

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> Optional[SeqV]:
        return seqv_from_obj(self._rpc(self._read_rpc, {"get": check_key(key)})["result"])

    def mget(self, keys: Sequence[str]) -> List[Optional[SeqV]]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
            raise MetaInvalidArgument(f"keys must be a list of str, got {type(keys).__name__}")
        return [seqv_from_obj(v) for v in self._rpc(self._read_rpc, {"mget": [check_key(k) for k in keys]})["result"]]

    def list(self, prefix: str, limit: Optional[int] = None) -> List[Tuple[str, SeqV]]:
        res = self._rpc(self._read_rpc, {"list": {"prefix": check_key(prefix, "prefix"), "limit": limit}})["result"]
        return [(k, seqv_from_obj(v)) for k, v in res]

    @property
    def seq(self) -> int:
        return self._rpc(self._read_rpc, {"seq": None})["result"]

    # ------------------------------------------------------------------ watch
    def watch(self, key: str, key_end: Optional[str] = None, filter: str = "all",
              initial_flush: bool = False) -> RemoteWatcher:
        req = {"key": check_key(key), "key_end": None if key_end is None else check_key(key_end, "key_end"),
               "filter": check_filter(filter), "initial_flush": bool(initial_flush)}
        return RemoteWatcher(self._watch(dumps(req)))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "MetaClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect_meta(addr: str, timeout: float = 30.0) -> MetaClient:
    """A client of the meta-service at `addr` ("host:port") with the same API as MetaService."""
    return MetaClient(addr, timeout)
