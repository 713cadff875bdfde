"""HAKeeperHost: one HAKeeper replica in a process: a RaftNode running HAKeeperStateMachine over
its own DiskStorage directory, served on an address of its own (a DualServer) that carries Raft's
peer traffic (framed carrier only) and HAKeeperService, plus the leader's loops.

The peer addresses are these serving addresses (`--hakeeper-peers 1=H:P,...`). A store process
(`logtide logservice serve --raft --hakeeper-id K ...`) or `logtide hakeeper serve` runs one.
"""
from __future__ import annotations

import os
import time
from typing import Any

from logtide.engine.dir_lock import DirLock
from logtide.engine.hakeeper.cluster_info import ClusterInfo
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.hakeeper_service import HAKEEPER_SERVICE, HAKeeperServicer
from logtide.engine.hakeeper.leader_loops import CHECK_INTERVAL, LeaderLoops
from logtide.engine.hakeeper.state_machine import HAKeeperStateMachine
from logtide.engine.hakeeper.status_view import status_view
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.nodehost.node import RaftNode
from logtide.engine.nodehost.transport import RAFT_SERVICE
from logtide.engine.raft.errors import NotLeader, ProposalDropped, RaftStopped, RaftTimeout
from logtide.engine.rpc.dual_server import DualServer
from logtide.errors import HAKeeperNotLeader, HAKeeperUnavailable, InvalidArgument

REQUEST_TIMEOUT = 3.0      # a proposal waits this long for its commit
SNAPSHOT_ENTRIES = 2_000   # ticks alone are 36,000 entries an hour: snapshot and compact often
COMPACT_KEEP = 500


class HAKeeperHost:
    def __init__(self, path: str, replica_id: int, peers: dict[int, str], *, listen: str | None = None,
                 config: HAKeeperConfig | None = None, cluster_info: ClusterInfo | None = None,
                 tick_interval: float = 0.1, election_tick: int = 6, check_interval: float = CHECK_INTERVAL,
                 request_timeout: float = REQUEST_TIMEOUT, snapshot_entries: int = SNAPSHOT_ENTRIES,
                 compact_keep: int = COMPACT_KEEP) -> None:
        if replica_id not in peers:
            raise InvalidArgument(f"HAKeeper replica id {replica_id} is not one of the peers {sorted(peers)}")
        self.id, self.peers = replica_id, dict(peers)
        self.config = config or HAKeeperConfig()
        self.request_timeout = request_timeout
        os.makedirs(path, exist_ok=True)
        self.dir = os.path.abspath(path)
        self._dir_lock = DirLock(self.dir, "hakeeper.lock", "HAKeeper replica directory")
        try:
            self.storage = DiskStorage.open(os.path.join(self.dir, "raft"), voters=sorted(peers))
            self.sm = HAKeeperStateMachine()
            self.node = RaftNode(replica_id, self.storage, self.sm, peers=peers, tick_interval=tick_interval,
                                 election_tick=election_tick, snapshot_entries=snapshot_entries,
                                 compact_keep=compact_keep)
            self.server = DualServer(listen or peers[replica_id])
            self.server.add_service(RAFT_SERVICE, self.node.transport.servicer, grpc=False)
            self.server.add_service(HAKEEPER_SERVICE, HAKeeperServicer(self))
            self.port = self.server.start()
            self.address = self.server.address
        except BaseException:
            self._dir_lock.release()
            raise
        self.node.start()
        self.loops = LeaderLoops(self.node, self.sm, self.config, check_interval=check_interval,
                                 cluster_info=cluster_info, name=f"hakeeper-{replica_id}").start()

    def is_leader(self) -> bool:
        return self.node.is_leader()

    def leader_address(self) -> str:
        lead = self.node.leader
        return self.peers.get(lead, "") if lead else ""

    def propose(self, cmd: bytes) -> Any:
        """Propose on this replica, which must lead: the state machine's result, or its typed error."""
        if not self.node.is_leader():
            raise self._not_leader()
        try:
            return self.node.propose(cmd, timeout=self.request_timeout)[1]
        except (NotLeader, ProposalDropped):
            raise self._not_leader() from None
        except (RaftTimeout, RaftStopped) as exc:   # handed to Raft: its outcome is unknown
            raise HAKeeperUnavailable(f"HAKeeper replica {self.id}: {exc}") from None

    def _not_leader(self) -> HAKeeperNotLeader:
        addr = self.leader_address()
        where = f"leader at {addr}" if addr else "leader unknown"
        return HAKeeperNotLeader(f"HAKeeper replica {self.id} is not the leader ({where})")

    def status(self, linearizable: bool = False) -> dict:
        """This replica's applied state with its Raft role, term and leader; stale on a follower,
        and on a leader too unless `linearizable`. With it, a leader reads after a ReadIndex barrier,
        so the state holds every command committed before the call (a new leader may not have
        applied them yet), and raises HAKeeperNotLeader when a heartbeat quorum does not confirm
        its leadership. The Status RPC asks for it; this process's own periodic line does not."""
        if linearizable and self.node.is_leader():
            try:
                self.node.leader_read_index(timeout=self.request_timeout)
            except (NotLeader, RaftTimeout, RaftStopped) as exc:
                raise HAKeeperNotLeader(f"HAKeeper replica {self.id} could not confirm its leadership: "
                                        f"{type(exc).__name__}: {exc}") from None
        raft = self.node.status()
        out = status_view(self.sm.lookup("state"), self.config)
        out.update({"replica": self.id, "address": self.address, "role": raft.get("role", ""),
                    "raft_term": raft.get("term", 0), "leader": raft.get("lead", 0),
                    "leader_address": self.leader_address(),
                    "ticks_proposed": getattr(getattr(self, "loops", None), "ticks_proposed", 0)})
        return out

    def wait_leader(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while not self.node.leader:
            if time.monotonic() >= end:
                raise HAKeeperUnavailable(f"HAKeeper replica {self.id} found no leader within {timeout:g} s")
            time.sleep(0.02)
        return self.node.leader

    def close(self) -> None:
        self.loops.stop()
        try:
            self.server.stop(0.5)
        finally:
            self.node.stop()
            self.storage.close()
            self._dir_lock.release()
