"""MetaReplica: one replica of the meta-service as a Raft group (the Databend seed's layout).

A RaftNode (engine/raft: RawNode + DiskStorage + RaftTransport, one driver thread) applies the
committed log entries {time_ms, cmd} to a ReplicaStateMachine (the RSM interface). The leader
stamps time_ms when it proposes, from its clock kept monotonic (never below the last time it
stamped nor the last time applied), so TTL expiry runs on log time, the same on every replica.
Every `snapshot_entries` applied entries the state machine is snapshotted and the Raft log
compacted below it; a replica that fell behind the compaction is sent the snapshot.

One address per replica (DualServer) carries, on the framed carrier, the Raft transport, the
replica-to-replica Forward call and the client API (MetaService, served by ReplicaServicer:
forwarded to the leader when this replica is not it); gRPC clients reach the client API on the
same address. The peer addresses are these serving addresses. See docs/meta_raft.md.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from logtide.engine.dir_lock import DirLock
from logtide.engine.meta import grpc_format as G
from logtide.engine.meta.command import TxnCmd, UpsertCmd, check_key
from logtide.engine.meta.log_entry import encode_entry
from logtide.engine.meta.node_info import AddNodeCmd, NodeInfo, RemoveNodeCmd
from logtide.engine.meta.replica_state_machine import ReplicaStateMachine
from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.service import wall_clock_ms
from logtide.engine.meta.watch import Watcher, check_filter, start_watch
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.errors import NotLeader, ProposalDropped, RaftStopped, RaftTimeout
from logtide.engine.nodehost.node import RaftNode
from logtide.engine.nodehost.transport import RAFT_SERVICE
from logtide.engine.rpc.dual_server import DualServer
from logtide.errors import (MetaClosedError, MetaDeadlineExceeded, MetaInvalidArgument, MetaNotLeader,
                            MetaUnavailableError)

REQUEST_TIMEOUT = 5.0      # seconds a request waits for a commit or a read barrier when its caller names no deadline
SERVER_WORKERS = 128       # calls block until committed; Raft's own calls must still find a thread
SNAPSHOT_ENTRIES = 10_000  # applied entries between state machine snapshots (each lets the Raft log be compacted)
COMPACT_KEEP = 2_000       # entries kept below a snapshot, so a briefly lagging replica needs no snapshot
LEADER_WAIT = 1.5          # how long a replica that knows no leader waits for one before refusing a request
CONSISTENCY = ("linearizable", "stale")
MEMBER_RECORD_S = 0.5      # how often the leader checks that every member has a node record


def check_consistency(c: str) -> str:
    """"" means linearizable; anything but the two names is MetaInvalidArgument."""
    c = c or "linearizable"
    if c not in CONSISTENCY:
        raise MetaInvalidArgument(f"consistency must be one of {CONSISTENCY}, got {c!r}")
    return c


class MetaReplica:
    """One replica: state, proposals, reads and watches; served by `self.server`."""

    def __init__(self, path, node_id: int, peers: Dict[int, str], listen: Optional[str] = None, *,
                 clock: Optional[Callable[[], int]] = None, tick_interval: float = 0.1, election_tick: int = 6,
                 fsync: str = "always", snapshot_entries: int = SNAPSHOT_ENTRIES, compact_keep: int = COMPACT_KEEP,
                 request_timeout: float = REQUEST_TIMEOUT, cluster_id: int = 1, join: bool = False) -> None:
        """join=True: a new replica, not a founder; it waits to be added as a learner
        (`logtide meta member add --learner`) and learns the membership from the leader."""
        from logtide.engine.meta.forwarding import Forwarder
        from logtide.engine.meta.membership import Membership
        from logtide.engine.meta.replica_server import META_FORWARD, ForwardServicer, ReplicaServicer
        from logtide.engine.meta.server import META
        if node_id not in peers:
            raise MetaInvalidArgument(f"replica id {node_id} is not one of the peers {sorted(peers)}")
        self.id = node_id
        self.peers = dict(peers)
        self.request_timeout = request_timeout
        self.tick_interval, self.election_tick = tick_interval, election_tick
        os.makedirs(path, exist_ok=True)
        self.dir = os.path.abspath(path)
        self._dir_lock = DirLock(self.dir, "meta.lock", "meta replica directory")
        self._clock = clock or wall_clock_ms
        self._time_lock = threading.Lock()   # stamping and handing to Raft happen together: log time never goes back
        self._closed = False
        try:
            self.storage = DiskStorage.open(os.path.join(self.dir, "raft"), voters=None if join else sorted(peers),
                                            fsync=fsync)
            self.rsm = ReplicaStateMachine()
            self.node = RaftNode(node_id, self.storage, self.rsm, peers=peers, cluster_id=cluster_id,
                                 tick_interval=tick_interval, election_tick=election_tick,
                                 snapshot_entries=snapshot_entries, compact_keep=compact_keep)
            self._last_time_ms = self.rsm.sm.last_time_ms
            self.forwarder = Forwarder(self)
            self.membership = Membership(self)
            self.server = DualServer(listen or peers[node_id], max_message_size=G.MAX_MESSAGE_BYTES,
                                     workers=SERVER_WORKERS, grpc_workers=SERVER_WORKERS)
            # replicas talk to each other on the framed carrier only; clients on either
            self.server.add_service(RAFT_SERVICE, self.node.transport.servicer, grpc=False)
            self.servicer = ReplicaServicer(self)
            self.server.add_service(META, self.servicer)
            self.server.add_service(META_FORWARD, ForwardServicer(self), grpc=False)
            self.port = self.server.start()
            self.address = self.server.address
        except BaseException:
            self._dir_lock.release()
            raise
        self.node.start()
        self._recorder = threading.Thread(target=self._record_members, name=f"meta-members-{node_id}", daemon=True)
        self._recorder.start()

    # ------------------------------------------------------------------ leadership
    def is_leader(self) -> bool:
        return self.node.is_leader()

    def address_of(self, node_id: int) -> str:
        """The client address of replica `node_id` ("" when unknown)."""
        if node_id == self.id:
            return self.peers.get(self.id, self.address)
        return self.node.addresses.get(node_id) or self.peers.get(node_id, "")

    def leader_address(self) -> str:
        """The client address of the leader this replica knows of ("" when none)."""
        lead = self.node.leader
        return self.address_of(lead) if lead else ""

    def wait_leader(self, timeout: float) -> int:
        """The leader's id, waiting up to `timeout` (capped at LEADER_WAIT) for one to be known;
        MetaNotLeader when none is."""
        end = time.monotonic() + min(timeout, LEADER_WAIT)
        while True:
            lead = self.node.leader
            if lead:
                return lead
            if time.monotonic() >= end:
                raise MetaNotLeader(f"replica {self.id} knows no leader (an election is under way or the "
                                    f"group has no quorum)")
            time.sleep(0.01)

    def not_leader_error(self, exc: BaseException) -> MetaNotLeader:
        """MetaNotLeader for `exc`, naming the leader (and its address) when one is known."""
        lead = getattr(exc, "leader", 0) or self.node.leader
        addr = self.address_of(lead) if lead else ""
        where = f"leader {lead} at {addr}" if addr else "leader unknown"
        return MetaNotLeader(f"replica {self.id} is not the leader ({where}): {exc}")

    # ------------------------------------------------------------------ writes (on the leader)
    def _stamp(self) -> int:
        t = max(int(self._clock()), self._last_time_ms, self.rsm.sm.last_time_ms)
        self._last_time_ms = t
        return t

    def apply_commands(self, cmds: Sequence, timeout: Optional[float] = None) -> list:
        """Propose commands as one group (one entry each, one time_ms, one fsync) and wait until
        each is applied here; each item of the result is its reply or its typed error:
        MetaNotLeader (not proposed, or dropped uncommitted: safe to send again),
        MetaDeadlineExceeded (not applied by the deadline: it may still commit)."""
        for c in cmds:
            if not isinstance(c, (UpsertCmd, TxnCmd, AddNodeCmd, RemoveNodeCmd)):
                raise MetaInvalidArgument(f"not a command: {c!r}")
        if self._closed:
            raise MetaClosedError("the meta replica is closed")
        timeout = self.request_timeout if timeout is None else timeout
        if not self.is_leader():
            raise self.not_leader_error(NotLeader("not the leader", self.node.leader))
        try:
            with self._time_lock:
                t = self._stamp()
                futures = self.node.submit_many([encode_entry(t, c) for c in cmds])
        except RaftStopped as exc:
            raise MetaUnavailableError(f"meta replica {self.id}: {exc}") from None
        end = time.monotonic() + timeout
        out: list = []
        for f in futures:
            try:
                out.append(f.wait(max(0.0, end - time.monotonic()), f"meta proposal on replica {self.id}"))
            except ProposalDropped as exc:     # NotLeader too: never committed
                out.append(self.not_leader_error(exc))
            except RaftTimeout as exc:
                out.append(MetaDeadlineExceeded(f"meta replica {self.id}: {exc} (it may still commit)"))
            except RaftStopped as exc:
                out.append(MetaUnavailableError(f"meta replica {self.id}: {exc} (it may still commit)"))
            except Exception as exc:  # noqa: BLE001 - the state machine refused the command: its reply
                out.append(exc)
        return out

    def apply_command(self, cmd, timeout: Optional[float] = None):
        r = self.apply_commands([cmd], timeout)[0]
        if isinstance(r, BaseException):
            raise r
        return r

    # ------------------------------------------------------------------ reads
    def read_barrier(self, timeout: Optional[float] = None) -> None:
        """Linearizable reads may follow: this replica, as the leader, confirmed its leadership by
        a heartbeat quorum after the call began and applied everything committed before (ReadIndex)."""
        timeout = self.request_timeout if timeout is None else timeout
        try:
            self.node.leader_read_index(timeout=timeout)
        except NotLeader as exc:
            raise self.not_leader_error(exc) from None
        except RaftTimeout as exc:
            raise MetaDeadlineExceeded(f"meta replica {self.id}: read barrier: {exc}") from None
        except RaftStopped as exc:
            raise MetaUnavailableError(f"meta replica {self.id}: {exc}") from None

    def _read(self, fn, *args):
        with self.rsm.lock:
            if self._closed:
                raise MetaClosedError("the meta replica is closed")
            return fn(*args, int(self._clock()))

    def get(self, key: str) -> Optional[SeqV]:
        return self._read(self.rsm.sm.get, check_key(key))

    def mget(self, keys: List[str]) -> List[Optional[SeqV]]:
        return self._read(self.rsm.sm.mget, [check_key(k) for k in keys])

    def list(self, prefix: str, limit: Optional[int] = None) -> List[Tuple[str, SeqV]]:
        return self._read(self.rsm.sm.list, check_key(prefix, "prefix"), limit)

    @property
    def seq(self) -> int:
        with self.rsm.lock:
            return self.rsm.sm.seq

    def watch(self, key: str, key_end: Optional[str] = None, filter: str = "all",
              initial_flush: bool = False, after: Optional[Tuple[int, int]] = None) -> Watcher:
        """Events of this replica's applies for keys in [key, key_end), from now on (any replica
        applies every entry, in log order), or from the change after cursor `after` (index, pos)."""
        check_key(key)
        if key_end is not None:
            check_key(key_end, "key_end")
        f = check_filter(filter)
        with self.rsm.lock:
            if self._closed:
                raise MetaClosedError("the meta replica is closed")
            return start_watch(self.rsm.hub, self.rsm.sm, key, key_end, f, bool(initial_flush), int(self._clock()),
                               after)

    def status(self) -> dict:
        """The Raft state (role, term, leader, commit, applied, ...) plus seq, address and directory."""
        st = self.node.status()
        st["seq"] = self.seq
        st["address"] = self.address_of(self.id)
        st["leader_address"] = self.leader_address()
        st["dir"] = self.dir
        st["nodes"] = self.nodes()
        return st

    def nodes(self) -> Dict[int, NodeInfo]:
        """The node records this replica applied (AddNode / RemoveNode), by id."""
        with self.rsm.lock:
            return self.rsm.sm.nodes()

    def change_member(self, op: str, node_id: int, address: str = "", timeout: Optional[float] = None) -> None:
        """A membership change, on the leader (Membership): "add_learner", "promote" or "remove"."""
        if self._closed:
            raise MetaClosedError("the meta replica is closed")
        if not self.is_leader():
            raise self.not_leader_error(NotLeader("not the leader", self.node.leader))
        self.membership.change(op, node_id, address, self.request_timeout if timeout is None else timeout)

    def _record_members(self) -> None:
        """While this replica leads, every member gets a node record (see Membership.record_members)."""
        while not self._closed:
            time.sleep(MEMBER_RECORD_S)
            if self.is_leader():
                try:
                    self.membership.record_members(self.request_timeout)
                except Exception:  # noqa: BLE001 - leadership lost, a slow commit: tried again later
                    pass

    # ------------------------------------------------------------------ lifecycle
    def wait(self) -> None:
        self.server.wait()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.servicer.stopped = True
        self.server.stop(grace=0.5)
        self.forwarder.close()
        self.node.stop()
        self.storage.close()
        self.rsm.close()
        self._dir_lock.release()

    def __enter__(self) -> "MetaReplica":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
