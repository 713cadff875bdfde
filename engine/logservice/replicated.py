"""The replicated log service: one replica of a log kept by Raft (the seed's dragonboat layout).

LSN = Raft index. append, truncate, TSO and reader registration go through Raft as commands of
ReplicatedLogStateMachine; the records are the Raft log itself (DiskStorage: the log service's
segment files). Reads by default pass a ReadIndex barrier first (linearizable; any replica may
serve, the barrier asks the leader); stale=True serves this replica's applied state at once.
Physical removal of log segments stays local to each replica and never goes below
min(snapshot index, truncated LSN, every registered reader's replayed LSN).

Serve with `ReplicatedLogService.open(dir, node_id, peers, listen)`; clients use
`connect_logservice("h1:p1,h2:p2,h3:p3")` (replicated_client.py).
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable

from google.protobuf.message import DecodeError

from logtide._ext.frame_codec import pack_counter_replies, pack_replies
from logtide.engine.logservice import replicated_pb2 as pb
from logtide.engine.logservice.log_format import DEFAULT_SEGMENT_SIZE, USER_RECORD
from logtide.engine.logservice.record import LogRecord
from logtide.engine.logservice.replicated_state_machine import (
    ReplicatedLogStateMachine, append_command, batch_append_commands, json_command, parse_append)
from logtide.engine.raft import messages as M
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.errors import CompactedError, NotLeader, RaftTimeout
from logtide.engine.raft.messages import ConfChange
from logtide.engine.nodehost.node import RaftNode
from logtide.arg_checks import reader_name
from logtide.engine.logservice.dir_kind import RAFT_SUBDIR
from logtide.engine.nodehost.transport import RAFT_SERVICE
from logtide.engine.rpc import RpcServer, ServiceDef
from logtide.engine.rpc.address import split_address
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import InvalidArgument, InvalidRange, InvalidRequest

log = logging.getLogger("logtide.logservice")

REPLICATED_SERVICE = ServiceDef.from_proto(pb, "ReplicatedLogService")
REQUEST_TIMEOUT = 5.0          # seconds a replica waits for Raft to commit or confirm a request
SERVER_WORKERS = 256           # client calls block until committed; Raft's election calls must still find a worker
MAX_READ_SIZE = 16 << 20
TSO_WINDOW = 4096              # timestamps a leader reserves with one Raft command
MAX_APPEND_MANY = 4096         # records in one multi-record append


def parse_peers(text: str) -> dict[int, str]:
    """"1=h:p,2=h:p,..." -> {1: "h:p", ...}."""
    out: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ident, sep, addr = part.partition("=")
        if not sep or not (ident.isascii() and ident.isdigit()) or int(ident) <= 0 or ":" not in addr:
            raise InvalidArgument(f"peer {part!r}: expected ID=HOST:PORT with a positive ID")
        try:
            split_address(addr)   # a port a peer can be reached on (not 0, not past 65535)
        except InvalidArgument as exc:
            raise InvalidArgument(f"peer {part!r}: {exc}") from None
        if int(ident) in out:
            raise InvalidArgument(f"peer {part!r}: ID {int(ident)} is given twice")
        out[int(ident)] = addr
    if not out:
        raise InvalidArgument("no peers given")
    return out


def lsn_reply_frames(ids: list, lsns: list) -> bytes:
    """The RLsn reply frames of call ids[k] at lsns[k]: one C call when the LSNs run consecutively
    (a retried append's earlier LSN breaks the run)."""
    first = lsns[0]
    if lsns == list(range(first, first + len(lsns))):
        return pack_counter_replies(ids, first)
    return pack_replies(ids, [pb.RLsn(lsn=x).SerializeToString() for x in lsns])


class ReplicatedLogService:
    """One replica: RaftNode + DiskStorage + ReplicatedLogStateMachine, served over the framed carrier
    (its clients and its peers' Raft traffic on one port, `.address`) and, when `grpc_listen` is
    given, to gRPC clients there too (`.grpc_address`; no Raft traffic)."""

    @classmethod
    def open(cls, path, node_id: int, peers: dict[int, str], listen: str, *, join: bool = False,
             cluster_id: int = 1, tick_interval: float = 0.1, election_tick: int = 6, fsync: str = "always",
             segment_size: int = DEFAULT_SEGMENT_SIZE, snapshot_entries: int = 20000, compact_keep: int = 5000,
             request_timeout: float = REQUEST_TIMEOUT, grpc_listen: str | None = None) -> "ReplicatedLogService":
        """Open (or create) replica `node_id` in `path`. A new replica founds the group of `peers`
        unless join=True (then it waits to be added as a learner by the leader)."""
        return cls(os.fspath(path), node_id, dict(peers), listen, join, cluster_id, tick_interval, election_tick,
                   fsync, segment_size, snapshot_entries, compact_keep, request_timeout, grpc_listen)

    def __init__(self, path, node_id, peers, listen, join, cluster_id, tick_interval, election_tick, fsync,
                 segment_size, snapshot_entries, compact_keep, request_timeout, grpc_listen=None) -> None:
        self.id = node_id
        self.timeout = request_timeout
        os.makedirs(path, exist_ok=True)
        self.dir = os.path.abspath(path)
        founders = None if join else sorted(peers)
        self.storage = DiskStorage.open(os.path.join(path, RAFT_SUBDIR), voters=founders, fsync=fsync,
                                        segment_size=segment_size)
        self.sm = ReplicatedLogStateMachine()
        self.node = RaftNode(node_id, self.storage, self.sm, peers=peers, cluster_id=cluster_id,
                             tick_interval=tick_interval, election_tick=election_tick,
                             snapshot_entries=snapshot_entries, compact_keep=compact_keep,
                             compact_bound=lambda: self.sm.lookup("deletion_bound"))
        self._tso_lock = threading.Lock()
        self._tso_window = (0, 0, 0)  # (next, end, term of the reserving entry): the leader's leased timestamps
        self.server = WireServer(listen, workers=SERVER_WORKERS, deferred_timeout=request_timeout)
        self.server.add_service(RAFT_SERVICE, self.node.transport.servicer)
        self.server.add_service(REPLICATED_SERVICE, ReplicatedLogServicer(self))
        self.port = self.server.start()
        self.address = self.server.address
        self.grpc: RpcServer | None = None
        self.grpc_address: str | None = None
        if grpc_listen is not None:
            try:
                self.grpc = RpcServer(grpc_listen, max_workers=SERVER_WORKERS)
                self.grpc.add_service(REPLICATED_SERVICE, ReplicatedLogServicer(self))
                self.grpc.start()
                self.grpc_address = self.grpc.address
            except BaseException:
                self.server.stop(0)
                self.storage.close()
                raise
        self.node.start()

    # --- helpers -----------------------------------------------------------------------------------

    def _leader_error(self, exc: NotLeader) -> NotLeader:
        lead = exc.leader or self.node.leader
        addr = self.node.addresses.get(lead, "") if lead != self.id else self.address
        where = f"leader {lead} at {addr}" if lead and addr else "leader unknown"
        return NotLeader(f"replica {self.id} is not the leader ({where})", lead)

    def _propose(self, cmd: bytes) -> tuple[int, Any]:
        try:
            return self.node.propose(cmd, timeout=self.timeout)
        except NotLeader as exc:
            raise self._leader_error(exc) from None

    def _barrier(self, stale: bool) -> None:
        if not stale:
            try:
                self.node.read_index(timeout=self.timeout)
            except NotLeader as exc:
                raise self._leader_error(exc) from None

    # --- the log service operations ------------------------------------------------------------------

    def append(self, client: int, seq: int, rtype: int, data: bytes) -> int:
        if not 0 <= rtype < 1 << 32:
            raise InvalidArgument(f"record type must be a u32, got {rtype}")
        return self._propose(append_command(client, seq, rtype, data))[1]

    def append_each(self, reqs: list[tuple[int, int, int, bytes]]) -> list[int | BaseException]:
        """Several appends (client, seq, type, data) proposed together; each gets its LSN or its error."""
        got: list = []
        settled = threading.Event()

        def done(out: list) -> None:
            got.append(out)
            settled.set()
        self.append_deferred(reqs, done)
        if not settled.wait(self.timeout):
            return [RaftTimeout(f"appends on replica {self.id} not applied within {self.timeout:g} s "
                                f"(they may still be)")] * len(reqs)
        return got[0]

    def append_deferred(self, reqs: list[tuple[int, int, int, bytes]],
                        done: Callable[[list[int | BaseException]], None]) -> None:
        """append_each without waiting: `done(results)` is called once every append is applied (or
        failed), on the Raft driver's thread."""
        out: list = [None] * len(reqs)
        cmds, where = [], []
        for i, (client, seq, rtype, data) in enumerate(reqs):
            if not 0 <= rtype < 1 << 32:
                out[i] = InvalidArgument(f"record type must be a u32, got {rtype}")
            else:
                cmds.append(append_command(client, seq, rtype, data))
                where.append(i)
        if not cmds:
            done(out)
            return

        def settled(results: list) -> None:
            for i, r in zip(where, results):
                out[i] = self._leader_error(r) if isinstance(r, NotLeader) else r
            done(out)

        self.node.submit_group(cmds, settled)

    def append_many(self, client: int, first_seq: int, rtype: int, datas: list[bytes]) -> list[int]:
        """Several records of one client, proposed together (consecutive Raft indexes, one fsync);
        returns each record's LSN. Record k has seq first_seq + k: a retried call gets the original
        LSNs of the records that reached the log and appends the rest. Raises the first error."""
        if not 0 <= rtype < 1 << 32:
            raise InvalidArgument(f"record type must be a u32, got {rtype}")
        if not 1 <= len(datas) <= MAX_APPEND_MANY:
            raise InvalidArgument(f"append_many takes 1 to {MAX_APPEND_MANY} records, got {len(datas)}")
        if first_seq == 0:
            raise InvalidArgument("append_many: seqs start at 1")
        out = []
        for r in self.node.propose_many(batch_append_commands(client, first_seq, rtype, datas), timeout=self.timeout):
            if isinstance(r, BaseException):
                raise self._leader_error(r) if isinstance(r, NotLeader) else r
            out.append(r[1])
        return out

    def read(self, first_lsn: int, max_size: int, stale: bool = False) -> tuple[list[LogRecord], int]:
        if first_lsn <= 0:
            raise InvalidRange(f"read({first_lsn}): LSNs start at 1")
        self._barrier(stale)
        applied = self.node.applied
        bound = self.sm.lookup("deletion_bound")
        first = self.storage.first_index()
        if first_lsn < first:
            raise InvalidRange(f"read({first_lsn}): LSNs below {first} are truncated on this replica "
                               f"(truncated LSN {self.sm.lookup('truncated_lsn')}, deletion bound {bound})")
        if first_lsn > applied + 1:
            raise InvalidRange(f"read({first_lsn}): beyond the end of the log (applied {applied})")
        if first_lsn == applied + 1:
            return [], first_lsn
        dups = self.sm.duplicates
        out: list[LogRecord] = []
        nxt = first_lsn
        while not out and nxt <= applied:  # a window of only internal entries: keep going, so an
            try:                           # empty answer always means the end of the log
                ents = self.storage.entries(nxt, applied + 1, min(max_size, MAX_READ_SIZE))
            except CompactedError as exc:
                raise InvalidRange(f"read({first_lsn}): {exc}") from None
            for e in ents:
                if e.type != M.ENTRY_NORMAL or e.index in dups:
                    continue
                a = parse_append(e.data)
                if a is not None:
                    out.append(LogRecord(e.index, a[2], a[3]))
            nxt = ents[-1].index + 1
        return out, nxt

    def truncate(self, lsn: int) -> None:
        self._propose(json_command("truncate", lsn=int(lsn)))

    def get_tso_timestamp(self, count: int) -> int:
        """The first of `count` timestamps, from the leader's leased window.

        The leader reserves TSO_WINDOW timestamps with one Raft command (the state machine's counter
        moves past them, so every later reservation, by any leader, lies above) and hands them out
        after a leader-only ReadIndex round: a heartbeat quorum confirms, after the call began, that
        it still leads in the term the window was reserved in. A deposed leader cannot get that
        confirmation, and a new leader's window lies above the old one, so ranges are disjoint and
        increase in real time (linearizable). Unused timestamps of a window are skipped."""
        if not 1 <= count <= 1 << 32:
            raise InvalidArgument(f"get_tso_timestamp(count): count must be in [1, 2**32], got {count}")
        if count > TSO_WINDOW // 4:
            return self._propose(json_command("tso", count=int(count)))[1]
        with self._tso_lock:
            for _attempt in range(3):
                try:
                    _index, term = self.node.leader_read_index(timeout=self.timeout)
                except NotLeader as exc:
                    raise self._leader_error(exc) from None
                first, end, wterm = self._tso_window
                if wterm == term and end - first >= count:
                    self._tso_window = (first + count, end, wterm)
                    return first
                try:
                    _index, eterm, first = self.node.propose_with_term(json_command("tso", count=TSO_WINDOW),
                                                                       timeout=self.timeout)
                except NotLeader as exc:
                    raise self._leader_error(exc) from None
                self._tso_window = (first, first + TSO_WINDOW, eterm)
            raise NotLeader(f"replica {self.id}: leadership changed while reserving TSO timestamps", 0)

    def lookup(self, query: str, stale: bool = False):
        self._barrier(stale)
        return self.sm.lookup(query)

    def status(self) -> dict:
        st = self.node.status()
        st["address"] = self.address
        st["dir"] = self.dir
        st["readers"] = self.sm.lookup("readers")
        st["truncated_lsn"] = self.sm.lookup("truncated_lsn")
        return st

    def close(self) -> None:
        if self.grpc is not None:
            self.grpc.stop(grace=0.5)
        self.server.stop(grace=0.5)
        self.node.stop()
        self.storage.close()


class ReplicatedLogServicer:
    """The RPC methods of one replica (framed carrier and gRPC)."""

    def __init__(self, svc: ReplicatedLogService) -> None:
        self.s = svc

    def Append(self, req, ctx):
        return pb.RLsn(lsn=self.s.append(req.client, req.seq, req.type, req.data))

    def batch_Append(self, reqs, ctx):
        """The call pipeline's batch of Append calls: proposed together (one Ready, one fsync)."""
        out = self.s.append_each([(r.client, r.seq, r.type, r.data) for r in reqs])
        return [x if isinstance(x, BaseException) else pb.RLsn(lsn=x) for x in out]

    def defer_frames_Append(self, ids: list, datas: list, ctx, done) -> None:
        """The framed carrier's batch of Append calls, as raw request bytes: proposed together and
        answered when applied, with no server thread waiting for them, by `done(reply frames packed
        in C, [(call id, error)])`: no response object per call."""
        cmds, taken, failed = [], [], []
        parse = pb.RAppendRequest.FromString
        for cid, data in zip(ids, datas):
            try:
                r = parse(data)
            except (DecodeError, ValueError, TypeError) as exc:
                failed.append((cid, InvalidRequest(f"Append: malformed RAppendRequest: {exc}")))
                continue
            cmds.append(append_command(r.client, r.seq, r.type, r.data))
            taken.append(cid)
        if not cmds:
            done(b"", failed)
            return
        leader_error = self.s._leader_error

        def settled(results: list) -> None:
            ok, lsns = [], []
            for cid, r in zip(taken, results):
                if isinstance(r, BaseException):
                    failed.append((cid, leader_error(r) if isinstance(r, NotLeader) else r))
                else:
                    ok.append(cid)
                    lsns.append(r)
            done(lsn_reply_frames(ok, lsns) if ok else b"", failed)
        self.s.node.submit_group(cmds, settled)

    def AppendMany(self, req, ctx):
        return pb.RLsns(lsns=self.s.append_many(req.client, req.first_seq, req.type, list(req.data)))

    def Read(self, req, ctx):
        # max_size 0 is one record, as the single-node service and the embedded read take it
        recs, nxt = self.s.read(req.first_lsn, req.max_size, req.stale)
        return pb.RReadResponse(records=[pb.RRecord(lsn=r.lsn, type=r.type, data=r.data) for r in recs], next_lsn=nxt)

    def Truncate(self, req, ctx):
        self.s.truncate(req.lsn)
        return pb.REmpty()

    def GetTruncatedLsn(self, req, ctx):
        return pb.RLsn(lsn=self.s.lookup("truncated_lsn"))

    def GetLatestLsn(self, req, ctx):
        return pb.RLsn(lsn=self.s.lookup("last_record"))

    def GetFirstLsn(self, req, ctx):
        return pb.RLsn(lsn=max(self.s.storage.first_index(), self.s.lookup("deletion_bound", stale=True) + 1))

    def GetTsoTimestamp(self, req, ctx):
        return pb.RLsn(lsn=self.s.get_tso_timestamp(req.count))

    def RegisterReader(self, req, ctx):
        self.s._propose(json_command("register", name=reader_name(req.name), lsn=self._replayed(req)))
        return pb.REmpty()

    def ReportReplayed(self, req, ctx):
        self.s._propose(json_command("report", name=reader_name(req.name), lsn=self._replayed(req)))
        return pb.REmpty()

    def _replayed(self, req) -> int:
        """A reader's replayed LSN, no later than the log's end: one past it would hold nothing
        back from truncation (as the single-node service refuses it). The end is the Raft log's
        last index, which no applied record passes (applying may lag it a moment)."""
        last = max(self.s.node.last_index, self.s.lookup("last_record"))
        if req.lsn > last:
            raise InvalidArgument(f"reader {req.name!r}: replayed LSN {req.lsn} is beyond the latest LSN {last}")
        return req.lsn

    def UnregisterReader(self, req, ctx):
        self.s._propose(json_command("unregister", name=reader_name(req.name)))
        return pb.REmpty()

    def ChangeMembership(self, req, ctx):
        if req.op not in (M.ADD_LEARNER, M.ADD_VOTER, M.REMOVE) or req.node_id == 0:
            raise InvalidArgument(f"membership change: bad op {req.op} or node 0")
        try:
            idx = self.s.node.change_membership(ConfChange(req.op, req.node_id, req.address.encode()),
                                                timeout=2 * self.s.timeout)
        except NotLeader as exc:
            raise self.s._leader_error(exc) from None
        return pb.RLsn(lsn=idx)

    def TransferLeader(self, req, ctx):
        self.s.node.transfer_leader(req.lsn)
        return pb.REmpty()

    def Status(self, req, ctx):
        return pb.RStatus(json=json.dumps(self.s.status(), sort_keys=True, default=str))


__all__ = ["REPLICATED_SERVICE", "ReplicatedLogService", "USER_RECORD", "parse_peers"]
