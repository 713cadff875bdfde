"""RaftTransport: carries Raft messages between replicas over the RPC layer (gRPC or in-process).

Each peer gets one sender thread. The driver's messages for that peer are queued; the thread takes
everything queued and sends it as one batch (RaftTransport.Send in raft.proto), so while one call
is in flight the next batch builds up: replication is pipelined in batches, never a call per
entry. (A long-lived gRPC client stream per peer was the first design; under load, grpc-python
left messages of idle streams undelivered for seconds, which stalled elections, so each batch is
its own call, with a deadline.) A failed call is reported as unreachable (the leader falls back to
probing) and retried with backoff. Raft tolerates lost messages, so a full queue drops instead of
blocking the driver. Received batches are decoded and checked here (CRC, types, sender,
group) before the driver sees them; a bad message is dropped with a logged reason and counted.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable

from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage, RaftError, UnknownPeer
from logtide.engine.raft.messages import Message
from logtide.engine.raft.channel import connect_replica
from logtide.engine.raft.wire import decode_message, encode_message
from logtide.engine.rpc import ServiceDef, connect
from logtide.errors import LogtideError

log = logging.getLogger("logtide.raft")

RAFT_SERVICE = ServiceDef.from_proto(pb, "RaftTransport")
QUEUE_BATCHES = 1024        # batches waiting per peer before new ones are dropped
MAX_BATCH_MESSAGES = 4096   # messages merged into one call
MAX_BACKOFF = 0.5           # seconds between retries to an unreachable peer
CALL_TIMEOUT = 5.0          # deadline of one call (a snapshot may be large)
IDLE_POLL = 0.2             # how often an idle sender checks for close()


class _Servicer:
    def __init__(self, transport: "RaftTransport") -> None:
        self.t = transport

    def Send(self, batch, context) -> pb.RaftAck:
        return pb.RaftAck(messages=self.t.receive(batch))


class _Peer:
    def __init__(self, transport: "RaftTransport", peer_id: int, target: Any) -> None:
        self.t = transport
        self.id = peer_id
        self.target = target
        self.q: queue.Queue = queue.Queue(QUEUE_BATCHES)
        self.closed = False
        self.connected = False
        self.thread = threading.Thread(target=self._run, name=f"raft-{transport.node_id}-to-{peer_id}", daemon=True)
        self.thread.start()

    def _next_batch(self) -> pb.RaftBatch | None:
        """Everything queued for this peer as one batch (None once closed)."""
        while not self.closed:
            try:
                first = self.q.get(timeout=IDLE_POLL)
            except queue.Empty:
                continue
            if first is None:
                return None
            batch = first
            while len(batch.messages) < MAX_BATCH_MESSAGES:
                try:
                    more = self.q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.closed = True
                    break
                batch.messages.extend(more.messages)
            return batch
        return None

    def _run(self) -> None:
        backoff = 0.01
        client = None
        while not self.closed:
            batch = self._next_batch()
            if batch is None:
                break
            try:
                if client is None:
                    if isinstance(self.target, str):
                        client = connect_replica(RAFT_SERVICE, self.target, timeout=CALL_TIMEOUT)
                    else:
                        client = connect(RAFT_SERVICE, self.target)
                client.Send(batch)
                self.connected = True
                backoff = 0.01
            except (LogtideError, OSError, RuntimeError, ValueError) as exc:
                if self.closed:
                    break
                if self.connected:
                    log.info("raft %d: sending to %d failed: %s", self.t.node_id, self.id, exc)
                self.connected = False
                self.t.unreachable(self.id)
                time.sleep(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
        if client is not None:
            client.close()

    def close(self) -> None:
        self.closed = True
        try:
            self.q.put_nowait(None)
        except queue.Full:
            pass


class RaftTransport:
    """One replica's transport. `deliver(messages)` gets every valid batch received;
    `on_unreachable(peer)` hears of failed streams. Serve `servicer` under RAFT_SERVICE."""

    def __init__(self, node_id: int, cluster_id: int, deliver: Callable[[list[Message]], None],
                 on_unreachable: Callable[[int], None] | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._deliver = deliver
        self._on_unreachable = on_unreachable
        self.servicer = _Servicer(self)
        self._peers: dict[int, _Peer] = {}
        self._lock = threading.Lock()
        self.sent = self.dropped = self.received = self.rejected = 0
        self.errors: deque[RaftError] = deque(maxlen=64)  # the latest refusals, for status and tests

    def set_peer(self, peer_id: int, target: Any) -> None:
        """Reach `peer_id` at "host:port" (gRPC) or through a servicer object (in-process)."""
        with self._lock:
            old = self._peers.get(peer_id)
            if old is not None and old.target == target:
                return
            if old is not None:
                old.close()
            self._peers[peer_id] = _Peer(self, peer_id, target)

    def remove_peer(self, peer_id: int) -> None:
        with self._lock:
            p = self._peers.pop(peer_id, None)
        if p is not None:
            p.close()

    def peers(self) -> list[int]:
        return sorted(self._peers)

    def send(self, messages: list[Message]) -> None:
        by_peer: dict[int, list] = {}
        for m in messages:
            by_peer.setdefault(m.to, []).append(encode_message(m))
        for to, msgs in by_peer.items():
            p = self._peers.get(to)
            if p is None:
                self.dropped += len(msgs)
                continue
            try:
                p.q.put_nowait(pb.RaftBatch(cluster=self.cluster_id, frm=self.node_id, messages=msgs))
                self.sent += len(msgs)
            except queue.Full:
                self.dropped += len(msgs)
                self.unreachable(to)

    def unreachable(self, peer_id: int) -> None:
        if self._on_unreachable is not None:
            self._on_unreachable(peer_id)

    def receive(self, batch: pb.RaftBatch) -> int:
        """Check and deliver a received batch; returns how many messages were accepted."""
        if batch.cluster != self.cluster_id:
            self._refuse(UnknownPeer(f"a batch for Raft group {batch.cluster} from node {batch.frm}; "
                                     f"this is group {self.cluster_id}"))
            return 0
        if batch.frm not in self._peers:
            self._refuse(UnknownPeer(f"a batch from node {batch.frm}, which is not a known member"))
            return 0
        out = []
        for p in batch.messages:
            try:
                m = decode_message(p)
                if m.frm != batch.frm:
                    raise UnknownPeer(f"a message claiming node {m.frm} inside a batch from node {batch.frm}")
                if m.to != self.node_id:
                    raise UnknownPeer(f"a message for node {m.to} reached node {self.node_id}")
                if m.type in M.LOCAL_TYPES and m.type != M.TRANSFER_LEADER:
                    raise MalformedMessage(f"local message type {M.MSG_NAMES[m.type]} from the network")
                out.append(m)
            except (MalformedMessage, CorruptRaftEntry, UnknownPeer) as exc:
                self._refuse(exc)
        if out:
            self.received += len(out)
            self._deliver(out)
        return len(out)

    def _refuse(self, exc: RaftError) -> None:
        self.rejected += 1
        self.errors.append(exc)
        log.warning("raft %d: refused a message: %s", self.node_id, exc)

    def close(self) -> None:
        with self._lock:
            peers, self._peers = list(self._peers.values()), {}
        for p in peers:
            p.close()
        for p in peers:
            p.thread.join(timeout=2)
