"""connect_meta(addr): the embedded MetaService's API over the RPC layer (gRPC or in-process)."""
from __future__ import annotations

import queue
import re
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

from logtide.arg_checks import seconds_arg
from logtide.engine.meta import grpc_format as G
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.command import TxnCmd, UpsertCmd, check_key, check_match_seq, make_spec
from logtide.engine.meta.match_seq import ANY, MatchSeq
from logtide.engine.meta.node_info import NodeInfo, check_address, check_node_id
from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.txn_reply import TxnReply
from logtide.engine.meta.watch import WatchEvent, check_cursor, check_filter
from logtide.engine.meta.wire import (
    event_from_pb, seqv_from_pb, txn_reply_from_pb, txn_to_pb, upsert_reply_from_pb, upsert_to_pb)
from logtide.errors import (ConnectionRefused, DeadlineExceededError, InvalidArgument, MessageTooLarge,
                            MetaClosedError, MetaDeadlineExceeded, MetaInvalidArgument, MetaNotLeader,
                            MetaUnavailableError, RpcError, RpcStreamBroken, TlsError)


def _call(fn, *args, **kw):
    """Transport failures become MetaUnavailableError; typed errors from the server pass through."""
    try:
        return fn(*args, **kw)
    except MessageTooLarge:
        raise
    except DeadlineExceededError as exc:
        if isinstance(exc, MetaUnavailableError):
            raise
        raise MetaDeadlineExceeded(str(exc)) from None
    except RpcError as exc:
        if type(exc) in _UNAVAILABLE:
            raise MetaUnavailableError(str(exc)) from None
        raise


# transport failures (not typed errors from the server): unreachable, refused, deadline passed,
# connection broken, TLS refused
_UNAVAILABLE = (RpcError, DeadlineExceededError, RpcStreamBroken, ConnectionRefused, TlsError)


class RemoteWatcher:
    """A watch stream from the server: iterate it, poll with get(timeout), close() cancels it."""

    _END = object()

    def __init__(self, stream, ready_timeout: float = 30.0):
        self._stream = stream
        self._q: "queue.SimpleQueue" = queue.SimpleQueue()
        self._closed = False
        self._ready = threading.Event()
        self._failed = None
        self._reader = threading.Thread(target=self._pump, daemon=True, name="meta-watch")
        self._reader.start()
        # return only once the server has registered the watch: no change can fall in between
        if not self._ready.wait(ready_timeout):
            self.close()
            raise MetaUnavailableError(f"the watch was not established within {ready_timeout:g} s")
        if self._failed is not None:   # refused before it started (bad request, server gone)
            self.get(timeout=0)

    def _pump(self) -> None:
        try:
            for m in self._stream:
                if m.ready:
                    self._ready.set()
                    continue
                self._q.put(event_from_pb(m))
            self._q.put(self._END)
        except Exception as exc:  # handed to the consumer by get()
            if not self._ready.is_set():
                self._failed = exc
            self._q.put(exc)
        finally:
            self._ready.set()

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
        if isinstance(item, RpcError) and type(item) in _UNAVAILABLE:
            raise MetaUnavailableError(str(item))
        raise item

    def __iter__(self):
        while True:
            try:
                yield self.get()
            except MetaClosedError:
                return

    def close(self) -> None:
        self._closed = True
        self._stream.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MetaClient:
    """The embedded MetaService's API through an RpcClient. `leader` is the leader the last reply named.

    Given several replica addresses (or one replica's), the client follows the leader: each reply
    names it, and later calls go to it directly (unless follow_leader=False). A call a replica
    refused before proposing it (MetaNotLeader) is sent again, to the named leader or the next
    replica; so is a read that failed in transport. A write that failed in transport is not sent
    again (it may have been applied): its MetaUnavailableError reaches the caller, and the next
    call goes to the next replica. Every call ends by the client's `timeout`.
    """

    def __init__(self, rpc, addresses: Optional[Sequence[str]] = None, connect_rpc=None,
                 timeout: float = 30.0, follow_leader: bool = True):
        self._rpc = rpc
        self.leader: Optional[str] = None
        self._addresses = list(addresses or [])
        self._connect = connect_rpc
        self._timeout = _timeout_arg(timeout)
        self._follow = follow_leader
        self._rpcs = {self._addresses[0]: rpc} if self._addresses else {}
        self._current = self._addresses[0] if self._addresses else None
        self._lock = threading.Lock()

    def _rpc_of(self, addr: str):
        with self._lock:
            c = self._rpcs.get(addr)
            if c is None:
                c = self._rpcs[addr] = self._connect(addr)
            return c

    def _move(self, failed: str, hint: Optional[str] = None) -> None:
        """The next call goes to `hint` (a leader named in a refusal) or to the replica after `failed`."""
        with self._lock:
            if self._current != failed:
                return                      # another thread moved it already
            if hint and hint != failed and (self._follow or hint in self._addresses):
                self._current = hint
                return
            i = self._addresses.index(failed) if failed in self._addresses else -1
            self._current = self._addresses[(i + 1) % len(self._addresses)]

    def _invoke(self, name: str, request, timeout: Optional[float] = None):
        if not self._addresses:       # in-process: one servicer, nothing to follow
            reply = _call(self._rpc.invoke, name, request, timeout=timeout)
            self.leader = reply.leader or None
            return reply
        total = self._timeout if timeout is None else timeout
        end = time.monotonic() + total
        backoff = 0.01
        while True:
            addr = self._current
            left = end - time.monotonic()
            try:
                reply = _call(self._rpc_of(addr).invoke, name, request, timeout=max(0.001, left))
            except MetaNotLeader as exc:     # refused before proposing: safe to send again
                m = _LEADER_AT.search(str(exc))
                self._move(addr, m.group(1) if m else None)
                if time.monotonic() + backoff >= end:
                    raise
                time.sleep(backoff)
                backoff = min(0.1, backoff * 2)
                continue
            except MetaUnavailableError:
                self._move(addr)
                # a write may have been applied: never sent twice; one known replica: nowhere else to go
                if name in _WRITES or len(self._addresses) == 1 or time.monotonic() + backoff >= end:
                    raise
                time.sleep(backoff)
                backoff = min(0.1, backoff * 2)
                continue
            self.leader = reply.leader or None
            if self._follow and reply.leader and reply.leader != addr:
                with self._lock:
                    if self._current == addr:
                        self._current = reply.leader
                if reply.leader not in self._addresses:
                    self._addresses.append(reply.leader)
            return reply

    # ------------------------------------------------------------------ writes
    def upsert(self, key: str, value, match_seq: MatchSeq = ANY, ttl_ms: Optional[int] = None,
               expire_at: Optional[int] = None) -> Tuple[Optional[SeqV], Optional[SeqV]]:
        cmd = UpsertCmd(key, value, check_match_seq(match_seq), make_spec(ttl_ms, expire_at))
        return upsert_reply_from_pb(self._invoke("Upsert", upsert_to_pb(cmd)))

    def txn(self, conditions=(), if_then=(), else_then=(), branches=None, operations=None) -> TxnReply:
        if branches is not None and operations is not None:
            raise MetaInvalidArgument("give branches or operations (its alias), not both")
        br = branches if branches is not None else operations
        cmd = TxnCmd(conditions or (), if_then or (), else_then or (), br or ())
        return txn_reply_from_pb(self._invoke("Txn", txn_to_pb(cmd)))

    # ------------------------------------------------------------------ reads
    def get(self, key: str, consistency: str = "linearizable") -> Optional[SeqV]:
        """consistency="stale" reads the answering replica's applied state (no leader involved)."""
        req = pb.GetRequest(key=check_key(key), consistency=_consistency(consistency))
        return seqv_from_pb(self._invoke("Get", req), "value")

    def mget(self, keys: Sequence[str], consistency: str = "linearizable") -> List[Optional[SeqV]]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
            raise MetaInvalidArgument(f"keys must be a list of str, got {type(keys).__name__}")
        r = self._invoke("MGet", pb.MGetRequest(keys=[check_key(k) for k in keys],
                                                consistency=_consistency(consistency)))
        return [seqv_from_pb(m, "value") for m in r.values]

    def list(self, prefix: str, limit: Optional[int] = None,
             consistency: str = "linearizable") -> List[Tuple[str, SeqV]]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise MetaInvalidArgument(f"limit must be None or an int >= 0, got {limit!r}")
        req = pb.ListRequest(prefix=check_key(prefix, "prefix"), consistency=_consistency(consistency))
        if limit is not None:
            req.limit = limit
        return [(m.key, seqv_from_pb(m, "value")) for m in self._invoke("List", req).items]

    def status(self, consistency: str = "linearizable") -> Any:
        """seq and applied index (and, on a Raft replica, its role, term, leader, commit index...);
        "stale" asks the answering replica about itself."""
        return self._invoke("Status", pb.StatusRequest(consistency=_consistency(consistency)))

    @property
    def seq(self) -> int:
        return self.status().seq

    # ------------------------------------------------------------------ membership (a Raft group)
    def add_learner(self, node_id: int, address: str) -> dict:
        """Add replica `node_id`, serving at `address`, as a learner (it gets the log, it does not
        vote); it was started with `logtide meta serve --raft --join`. Returns members()."""
        req = pb.MemberRequest(op="add_learner", node_id=check_node_id(node_id), address=check_address(address))
        return _members(self._invoke("ChangeMember", req))

    def promote_member(self, node_id: int) -> dict:
        """Make learner `node_id` a voter, once it has caught up (MetaMembershipRefused before)."""
        return _members(self._invoke("ChangeMember", pb.MemberRequest(op="promote", node_id=check_node_id(node_id))))

    def remove_member(self, node_id: int) -> dict:
        """Remove member `node_id` (MetaMembershipRefused when the voters left would have no quorum)."""
        return _members(self._invoke("ChangeMember", pb.MemberRequest(op="remove", node_id=check_node_id(node_id))))

    def members(self, consistency: str = "linearizable") -> dict:
        """{"voters": [...], "learners": [...], "nodes": {id: NodeInfo}}: the Raft membership and
        the node records of the state machine (the leader's, or with "stale" the answering replica's)."""
        return _members(self.status(consistency))

    @property
    def applied_index(self) -> int:
        return self.status().applied_index

    # ------------------------------------------------------------------ watch
    def watch(self, key: str, key_end: Optional[str] = None, filter: str = "all",
              initial_flush: bool = False, after=None) -> RemoteWatcher:
        """Events for keys in [key, key_end), from now on; or, with `after` (the last WatchEvent
        seen, or its cursor (index, pos)), from the change after it, on whichever replica this
        client talks to: a watcher whose replica died resumes on another with no gap and no
        duplicate (MetaWatchCompacted when that replica no longer keeps those changes)."""
        if not isinstance(initial_flush, bool):     # as MetaService.watch: bool("no") was True
            raise MetaInvalidArgument("initial_flush must be a bool")
        req = pb.WatchRequest(key=check_key(key), filter=check_filter(filter), initial_flush=initial_flush)
        if key_end is not None:
            req.key_end = check_key(key_end, "key_end")
        if after is not None:
            req.after_index, req.after_pos = check_cursor(after.cursor if isinstance(after, WatchEvent) else after)
        # a watch lives until closed: no per-call deadline
        if not self._addresses:
            return RemoteWatcher(_call(self._rpc.invoke, "Watch", req, timeout=G.WATCH_DEADLINE_S))
        end = time.monotonic() + self._timeout
        while True:   # a replica that does not answer (a dead one, say): the next one
            addr = self._current
            try:
                return RemoteWatcher(_call(self._rpc_of(addr).invoke, "Watch", req, timeout=G.WATCH_DEADLINE_S),
                                     ready_timeout=max(0.001, min(self._timeout, end - time.monotonic())))
            except MetaUnavailableError:
                self._move(addr)
                if len(self._addresses) == 1 or time.monotonic() >= end:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        with self._lock:
            rpcs = list(self._rpcs.values()) or [self._rpc]
            self._rpcs.clear()
        for c in rpcs:
            c.close()

    def __enter__(self) -> "MetaClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _timeout_arg(timeout: object) -> float:
    """The client's timeout, refused as the client's other arguments are (a MetaError too)."""
    try:
        return seconds_arg("timeout", timeout, allow_none=False)
    except InvalidArgument as exc:
        raise MetaInvalidArgument(str(exc)) from None


def connect_meta(target, timeout: float = 30.0, follow_leader: bool = True, carrier: str = "wire") -> MetaClient:
    """A client with the MetaService API: over the network for "host:port" (or "h1:p1,h2:p2,h3:p3",
    the replicas of a Raft group: any one's address works, the client follows the leader its
    replies name), in-process for a MetaService. carrier="wire" (the framed carrier) or "grpc":
    a meta server serves both on one address (docs/rpc.md)."""
    from logtide.engine.rpc import connect
    from logtide.engine.meta.server import META, MetaServicer
    from logtide.engine.meta.service import MetaService
    timeout = _timeout_arg(timeout)      # before dialling: the dial uses it
    if isinstance(target, MetaService):
        return MetaClient(connect(META, MetaServicer(target), copy=True))
    if not isinstance(target, str):
        raise MetaInvalidArgument(f"connect_meta takes 'host:port' or a MetaService, got {type(target).__name__}")
    addresses = [a.strip() for a in target.split(",") if a.strip()]
    if not addresses or any(":" not in a for a in addresses):
        raise MetaInvalidArgument(f"connect_meta takes 'host:port[,host:port...]', got {target!r}")

    if carrier not in ("wire", "grpc"):
        raise MetaInvalidArgument(f"carrier must be 'wire' or 'grpc', got {carrier!r}")

    def dial(addr: str, connect_timeout: float | None = None):
        return _call(connect, META, addr, max_message_size=G.MAX_MESSAGE_BYTES, timeout=timeout,
                     connect_timeout=min(timeout, 10.0) if connect_timeout is None else connect_timeout,
                     carrier=carrier)

    # any one replica's address works: a replica that is down (or still starting) is passed over,
    # all of them within `timeout`; the client starts on the first that answers. Each gets an even
    # share of the time left: a frozen replica (it accepts, never speaks) must not use up the rest's
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    for k, addr in enumerate(addresses):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            rpc = dial(addr, min(left / (len(addresses) - k), 10.0))
        except (MetaUnavailableError, MetaDeadlineExceeded) as exc:
            failed.append(str(exc))
            continue
        return MetaClient(rpc, addresses[k:] + addresses[:k], dial, timeout, follow_leader)
    raise MetaUnavailableError(f"no replica of {','.join(addresses)} answered within {timeout:g} s: "
                               + "; ".join(failed))


def _consistency(c: str) -> str:
    if c not in ("linearizable", "stale"):
        raise MetaInvalidArgument(f"consistency must be 'linearizable' or 'stale', got {c!r}")
    return "" if c == "linearizable" else c


_WRITES = ("Upsert", "Txn", "ChangeMember")


def _members(reply) -> dict:
    return {"voters": list(reply.voters), "learners": list(reply.learners),
            "nodes": {n.id: NodeInfo(n.id, n.address, n.role) for n in reply.nodes}}
_LEADER_AT = re.compile(r"leader \d+ at (\S+?)\)")
