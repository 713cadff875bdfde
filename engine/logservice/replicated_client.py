"""ReplicatedLogServiceClient: the log service client API over a Raft group, following its leader.

Each call goes to the replica believed to lead; a NotLeader answer (which names the leader's
address), an unreachable replica or an RPC deadline moves it to the named leader or the next
replica, with a short backoff, until the call's deadline. Appends are exactly-once: every thread
has its own client id and numbers its appends, and a retry resends the same (id, seq), so the
group stores it once and answers with the original LSN.
"""
from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
from typing import Iterable

import numpy as np

from logtide._ext.frame_codec import decode_counter, encode_rappend
from logtide.engine.logservice import replicated_pb2 as pb
from logtide.arg_checks import int_arg, lsn_arg, reader_name, seconds_arg
from logtide.engine.logservice.client import LogServiceClient, LogServiceConfig, RecordBatch
from logtide.engine.logservice.log_format import USER_RECORD
from logtide.engine.logservice.record import LogRecord, data_prefix
from logtide.engine.logservice.replicated import MAX_APPEND_MANY, REPLICATED_SERVICE
from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import MembershipRefused, NotLeader, ProposalDropped, RaftStopped, RaftTimeout
from logtide.engine.nodehost.channel import ReplicaTransport, connect_replica
from logtide.engine.rpc import RpcClient
from logtide.errors import InvalidArgument, InvalidTruncateLsn, LogServiceClosed, LogServiceError, RpcError

_LEADER_AT = re.compile(r"leader \d+ at (\S+?)\)")
CALL_TIMEOUT = 2.0      # one RPC to one replica
DEADLINE = 15.0         # a whole call, across leader changes (failover takes ~1-2 s by default)
DOWN_FOR = 3.0          # seconds a replica whose call failed in transport is passed over (unless all failed)
MAX_BACKOFF = 0.05      # between attempts while no replica leads (a NotLeader answer is cheap)
_ids = itertools.count(1)
APPEND_MANY_BYTES = 4 << 20  # record bytes in one AppendMany call (a larger single record goes alone)


class NoLeaderError(LogServiceError, RaftTimeout):
    """No replica led the group (or answered) before the call's deadline."""


class ReplicatedLogServiceClient(LogServiceClient):
    """connect_logservice("h1:p1,h2:p2,h3:p3"): the log service API over the replicas' framed carrier
    (carrier="wire", the default) or their gRPC ports (carrier="grpc", `serve --raft --grpc-listen`)."""

    def __init__(self, addresses: str | Iterable[str], *, deadline: float = DEADLINE,
                 call_timeout: float = CALL_TIMEOUT, carrier: str = "wire") -> None:
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        self.addresses = list(addresses)
        if not self.addresses:
            raise InvalidArgument("connect_logservice needs at least one HOST:PORT")
        self.deadline = seconds_arg("deadline", deadline, allow_none=False)   # NaN: retried forever
        self.call_timeout = seconds_arg("call_timeout", call_timeout, allow_none=False)
        self._wire = carrier == "wire"
        if self._wire:          # the unary calls of every thread batch on one connection per replica
            self._clients = {a: connect_replica(REPLICATED_SERVICE, a, timeout=call_timeout) for a in self.addresses}
        elif carrier == "grpc":  # ... or the interop carrier, a plain gRPC call each
            self._clients = {a: RpcClient(REPLICATED_SERVICE, ReplicaTransport(a, timeout=call_timeout))
                             for a in self.addresses}
        else:
            raise InvalidArgument(f"carrier must be 'wire' or 'grpc', got {carrier!r}")
        self._leader = self.addresses[0]
        self._down: dict[str, float] = {}  # address -> when a call to it failed in transport, since the last answer
        self._tls = threading.local()
        self._base = random.getrandbits(40) << 20  # client ids: distinct across processes
        self._closed = False

    # --- leader following ------------------------------------------------------------------------------

    def _next(self, addr: str) -> str:
        """The replica after `addr` that has not failed since the last answer, else the one that
        failed longest ago (a killed leader is not tried again at once)."""
        n = len(self.addresses)
        i = self.addresses.index(addr) if addr in self.addresses else -1
        cands = [a for a in (self.addresses[(i + k) % n] for k in range(1, n + 1)) if a != addr] or [addr]
        now = time.monotonic()
        for cand in cands:
            if now - self._down.get(cand, -DOWN_FOR) >= DOWN_FOR:
                return cand
        return min(cands, key=lambda a: self._down.get(a, 0.0))

    def _call(self, name: str, req, deadline: float | None = None, unsure: list | None = None):
        """`req` is the request message, or (framed carrier only) its bytes, serialized here; the
        reply comes back alike. `unsure` collects each failed attempt: the request may have been
        applied all the same (a reply lost on the way, a leader that stepped down with the entry
        in flight)."""
        if self._closed:
            raise LogServiceClosed("the log service client is closed")
        end = time.monotonic() + (deadline or self.deadline)
        backoff = 0.01
        last: BaseException | None = None
        while True:
            addr = self._leader
            try:
                if req.__class__ is bytes:
                    out = self._clients[addr].transport.call_bytes(REPLICATED_SERVICE.methods[name].path, req)
                else:
                    out = self._clients[addr].invoke(name, req)
                if self._down:
                    self._down.clear()  # an answer: earlier failures (restarts, a dead leader) are history
                return out
            except NotLeader as exc:
                last = exc
                if unsure is not None:
                    unsure.append(exc)
                m = _LEADER_AT.search(str(exc))
                hint = m.group(1) if m else None
                # a follower names its leader until its election timeout passes, also a leader that
                # just died: a hint at a replica that failed a moment ago is not followed
                if hint in self._clients and hint != addr and \
                        time.monotonic() - self._down.get(hint, -DOWN_FOR) >= DOWN_FOR:
                    self._leader = hint
                    continue  # follow the named leader at once
                self._leader = self._next(addr)
            except (RpcError, RaftTimeout, RaftStopped, ProposalDropped, LogServiceClosed) as exc:
                last = exc
                if unsure is not None:
                    unsure.append(exc)
                if isinstance(exc, RpcError):
                    self._down[addr] = time.monotonic()
                self._leader = self._next(addr)
            if time.monotonic() >= end:
                raise NoLeaderError(f"{name}: no leader answered within {deadline or self.deadline:g} s "
                                    f"(last error: {last})") from last
            time.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)

    def _session(self, n: int = 1) -> tuple[int, int]:
        """This thread's client id and the first of n new seqs."""
        t = self._tls
        if not hasattr(t, "client"):
            t.client, t.seq = self._base + next(_ids), 0
        t.seq += n
        return t.client, t.seq - n + 1

    # --- the log service API ---------------------------------------------------------------------------

    def append(self, payload: bytes | LogRecord, replica_id: int = 0, type: int = USER_RECORD) -> int:
        if payload.__class__ is bytes:
            prefix, data, rtype = data_prefix(replica_id), payload, type
        elif isinstance(payload, LogRecord):
            prefix, data, rtype = b"", bytes(payload.data), payload.type
        else:
            if not isinstance(payload, (bytes, bytearray, memoryview)):
                raise InvalidArgument(f"payload must be bytes-like, not {payload.__class__.__name__}")
            prefix, data, rtype = data_prefix(replica_id), bytes(payload), type
        rtype = int(int_arg("record type", rtype, 0, 1 << 32))  # None was stored as type 0; an IntEnum as its int
        client, seq = self._session()
        if self._wire:    # serialized in C, as protobuf would (data = prefix + payload, copied once)
            reply = self._call("Append", encode_rappend(client, seq, rtype, prefix, data))
            lsn = decode_counter(reply)
            return lsn if lsn >= 0 else pb.RLsn.FromString(reply).lsn
        return self._call("Append", pb.RAppendRequest(client=client, seq=seq, type=rtype, data=prefix + data)).lsn

    def append_each(self, payloads: Iterable[bytes], replica_id: int = 0, type: int = USER_RECORD) -> list[int]:
        """Append several records with one call (one Raft proposal batch, one fsync per replica);
        returns each record's LSN. Exactly once like append: a retry after a leader change or a
        time-out gives the records that were already in the log their original LSNs. The LSNs
        increase; they are consecutive unless a retry finished what an earlier attempt began."""
        if isinstance(payloads, (bytes, bytearray, memoryview)):
            raise InvalidArgument("append_each takes a sequence of payloads, not one bytes object")
        prefix = data_prefix(replica_id)
        int_arg("record type", type, 0, 1 << 32)
        datas = []
        for p in payloads:
            if not isinstance(p, (bytes, bytearray, memoryview)):
                raise InvalidArgument(f"payload must be bytes-like, not {p.__class__.__name__}")
            datas.append(prefix + bytes(p))
        if not datas:
            raise InvalidArgument("append_each needs at least one payload")
        out: list[int] = []
        at = 0
        while at < len(datas):  # calls of at most MAX_APPEND_MANY records and APPEND_MANY_BYTES
            end, size = at + 1, len(datas[at])
            while end < len(datas) and end - at < MAX_APPEND_MANY and size + len(datas[end]) <= APPEND_MANY_BYTES:
                size += len(datas[end])
                end += 1
            client, first = self._session(end - at)
            out += self._call("AppendMany", pb.RAppendManyRequest(client=client, first_seq=first, type=type,
                                                                   data=datas[at:end])).lsns
            at = end
        return out

    def append_many(self, payloads: Iterable[bytes], replica_id: int = 0, type: int = USER_RECORD) -> int:
        """append_each, returning the first LSN (the single-node API); use append_each for every LSN."""
        return self.append_each(payloads, replica_id, type)[0]

    def read(self, first_lsn: int, max_size: int, stale: bool = False) -> tuple[list[LogRecord], int]:
        # checked here: protobuf's own refusals ("Value out of range: -1") name no argument
        lsn_arg("first_lsn", first_lsn)
        int_arg("max_size", max_size, 0)
        if not isinstance(stale, bool):
            raise InvalidArgument(f"stale must be a bool, got {stale!r}")
        r = self._call("Read", pb.RReadRequest(first_lsn=first_lsn, max_size=max_size, stale=stale))
        return [LogRecord(x.lsn, x.type, x.data) for x in r.records], r.next_lsn

    def read_batch(self, first_lsn: int, max_size: int) -> RecordBatch:
        recs, nxt = self.read(first_lsn, max_size)
        # LSNs of a replicated log have gaps (internal entries): a batch holds the dense run from first_lsn
        run = []
        for r in recs:
            if r.lsn != first_lsn + len(run):
                nxt = first_lsn + len(run) if run else r.lsn
                break
            run.append(r)
        buf = b"".join(r.data for r in run)
        lengths = np.array([len(r.data) for r in run], dtype=np.uint32)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.uint64)[:-1]]).astype(np.uint64) if run \
            else np.empty(0, dtype=np.uint64)
        return RecordBatch(first_lsn, np.array([r.type for r in run], dtype=np.uint32), offsets, lengths, buf, nxt)

    def truncate(self, lsn: int) -> None:
        lsn_arg("lsn", lsn)                                  # None was truncate(0)
        unsure: list = []
        try:
            self._call("Truncate", pb.RLsn(lsn=lsn), unsure=unsure)
        except InvalidTruncateLsn:
            # a failed attempt (its answer lost to a frozen or killed leader) may have committed:
            # the retry then finds its own truncation done, which is success, not a move down
            if unsure and self.get_truncated_lsn() >= lsn:
                return
            raise

    def get_truncated_lsn(self) -> int:
        return self._call("GetTruncatedLsn", pb.REmpty()).lsn

    def get_latest_lsn(self) -> int:
        return self._call("GetLatestLsn", pb.REmpty()).lsn

    def get_first_lsn(self) -> int:
        return self._call("GetFirstLsn", pb.REmpty()).lsn

    def get_tso_timestamp(self, count: int) -> int:
        int_arg("count", count, 1, (1 << 32) + 1)            # as the single-node service checks it
        return self._call("GetTsoTimestamp", pb.RTsoRequest(count=count)).lsn

    def config(self) -> LogServiceConfig:
        return LogServiceConfig(",".join(self.addresses), "always", 0, 0, 0.0)

    def register_reader(self, name: str, replayed_lsn: int = 0) -> None:
        self._call("RegisterReader", pb.RReaderRequest(name=reader_name(name),
                                                       lsn=lsn_arg("replayed_lsn", replayed_lsn)))

    def report_replayed(self, name: str, lsn: int) -> None:
        self._call("ReportReplayed", pb.RReaderRequest(name=reader_name(name), lsn=lsn_arg("lsn", lsn)))

    def unregister_reader(self, name: str) -> None:
        self._call("UnregisterReader", pb.RReaderRequest(name=reader_name(name)))

    def readers(self) -> dict[str, int]:
        return json.loads(self._call("Status", pb.REmpty()).json).get("readers", {})

    def status(self, address: str) -> dict:
        """One replica's role, term, leader, commit, applied and last index (no leader needed)."""
        return json.loads(self._clients[address].invoke("Status", pb.REmpty()).json)

    def change_membership(self, op: int, node_id: int, address: str = "") -> int:
        """Add a learner, promote it to voter, or remove a member; returns the change's log index
        (the index of the membership in force, when a retried attempt found the change done)."""
        unsure: list = []
        try:
            return self._call("ChangeMembership", pb.RMembershipRequest(op=op, node_id=node_id, address=address),
                              deadline=2 * self.deadline, unsure=unsure).lsn
        except MembershipRefused:
            # as for truncate: a retry refused as "already done" finds the lost attempt's work
            if unsure:
                st = json.loads(self._call("Status", pb.REmpty()).json)  # the leader's view
                voters, members = set(st["voters"]), set(st["voters"]) | set(st["learners"])
                if (op == M.ADD_LEARNER and node_id in members) or (op == M.ADD_VOTER and node_id in voters) \
                        or (op == M.REMOVE and node_id not in members):
                    return int(st["conf_index"])
            raise

    def close(self) -> None:
        self._closed = True
        for c in self._clients.values():
            c.close()
