"""Replication between processes over the RPC layer: the WAL-meta stream and the feedback
(replication.proto), on the framed carrier (gRPC on the same port, for other languages).

The primary serves `Replication` (Subscribe, StreamMeta, Feedback); an RO node's ReplicationLink
subscribes, feeds every streamed message to the node's receiver, and reconnects from its applied
LSN when the stream breaks. Every replay process also serves `ReplayNode` (tuple reads and
writes, page reads, status, promotion) for clients and tests.
"""
from __future__ import annotations

import json
import logging
import threading

from logtide.engine.rpc import ServiceDef, connect
from logtide.errors import LogtideError, ReplicaDroppedError, ReplicaError
from logtide.replay import replication_pb2 as pb
from logtide.replay.wal_sender import meta_frames

log = logging.getLogger("logtide.replay.grpc")

REPLICATION = ServiceDef.from_proto(pb, "Replication")
REPLAY_NODE = ServiceDef.from_proto(pb, "ReplayNode")


class ReplicationServicer:
    def __init__(self, primary):
        self.primary = primary

    def Subscribe(self, req: pb.SubscribeRequest, ctx) -> pb.SubscribeReply:
        start, ready = self.primary.subscribe(req.node_id, req.index_from, req.mode)
        return pb.SubscribeReply(start_lsn=start, ready_lsn=ready)

    def StreamMeta(self, req: pb.StreamRequest, ctx):
        stop = threading.Event()
        self.primary.check_following(req.node_id)
        for frame in meta_frames(self.primary, max(1, req.from_lsn), stop):
            if not ctx.is_active():
                break
            self.primary.check_following(req.node_id)   # a dropped node's stream ends, typed
            yield pb.Frame(data=frame)

    def Feedback(self, req: pb.Frame, ctx) -> pb.FeedbackReply:
        self.primary.feedback(req.data)
        return pb.FeedbackReply(truncated_lsn=self.primary.truncated_lsn, consistent_lsn=self.primary.consistent_lsn)

    def Unsubscribe(self, req: pb.SubscribeRequest, ctx) -> pb.Empty:
        self.primary.unsubscribe(req.node_id)
        return pb.Empty()


class ReplicationLink:
    """Connects an RO node to a primary at `address` over gRPC.

    The receiver thread streams WAL meta and reconnects from the applied LSN when the stream
    breaks (keepalive ends a stream whose primary is gone, stopped or cut off). If the primary
    dropped the node (or forgot it: it restarted without holding it), the node re-syncs from
    storage and subscribes again (ReadOnlyNode.join)."""

    def __init__(self, ro, address: str, retry_s: float = 0.2, **rpc_options):
        self.ro = ro
        self.address = address
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stream = None
        self._joins = 0   # subscriptions so far: a stream's error from before the latest one is stale
        self.reconnects = 0
        self.client = connect(REPLICATION, address, carrier="wire", **rpc_options)
        ro._link = self
        self._join()
        self._thread = threading.Thread(target=self._run, name=f"receiver-ro{ro.node_id}", daemon=True)
        self._thread.start()

    def _subscribe(self, node_id: int, index_from: int, mode: int) -> tuple[int, int]:
        r = self.client.Subscribe(node_id=node_id, index_from=index_from, mode=mode)
        return r.start_lsn, r.ready_lsn

    def _join(self) -> None:
        with self._lock:
            start, ready = self.ro.join(self._subscribe)
            self.ro.attach(start, ready, self._feedback)
            self._joins += 1

    def _feedback(self, message: bytes) -> None:
        self.client.Feedback(data=message)

    def rejoin(self) -> None:
        """Subscribe again (re-syncing) and restart the stream from the new applied LSN."""
        if self._stop.is_set():
            return
        self._join()
        stream = self._stream
        if stream is not None:
            try:
                stream.cancel()
            except Exception:
                pass

    def _run(self) -> None:
        while not self._stop.is_set() and self.ro.error is None:
            joins = self._joins
            try:
                self._stream = self.client.StreamMeta(node_id=self.ro.node_id, from_lsn=self.ro.applied_lsn + 1)
                for f in self._stream:
                    if self._stop.is_set():
                        return
                    self.ro.receive(f.data)
            except LogtideError as exc:
                if self._stop.is_set():
                    return
                stale = joins != self._joins   # subscribed again meanwhile (rejoin cancelled this stream)
                if isinstance(exc, ReplicaDroppedError) and not stale:
                    self.ro.dropped(str(exc))
                if isinstance(exc, ReplicaError) and not stale:  # dropped, or the primary forgot us (restarted)
                    try:
                        self._join()
                    except LogtideError as exc2:
                        log.info("RO node %s: subscribe failed (%s); retrying", self.ro.node_id, exc2)
                log.info("RO node %s: WAL-meta stream broke (%s); reconnecting", self.ro.node_id, exc)
            self.reconnects += 1
            self._stop.wait(self._retry_s)

    def close(self) -> None:
        """Close the link: the primary drops the node at once (best effort: it may be unreachable)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.ro._send_feedback = None   # nothing to report to any more
        if self._stream is not None:
            try:
                self._stream.cancel()
            except Exception:
                pass
        try:
            self.client.Unsubscribe(node_id=self.ro.node_id, timeout=2.0)
        except LogtideError as exc:
            log.info("RO node %s: unsubscribe failed (%s); the primary drops it after its replica timeout",
                     self.ro.node_id, exc)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self.client.close()


def connect_replication(ro, address: str, **rpc_options) -> ReplicationLink:
    """Subscribe `ro` to the primary serving Replication at `address`."""
    return ReplicationLink(ro, address, **rpc_options)


class NodeServicer:
    """ReplayNode over a Primary or a ReadOnlyNode (`holder.node`); promotion swaps the node."""

    def __init__(self, holder):
        self.holder = holder

    def _primary(self):
        from logtide.replay.primary import Primary
        node = self.holder.node
        if not isinstance(node, Primary):
            raise ReplicaError("this node is read-only")
        return node

    def Insert(self, req: pb.TupleRequest, ctx) -> pb.TupleReply:
        p = self._primary()
        block, slot = p.insert(req.rel, req.data)
        return pb.TupleReply(block=block, slot=slot, found=True, lsn=p.write_lsn)

    def Update(self, req: pb.TupleRequest, ctx) -> pb.TupleReply:
        p = self._primary()
        block, slot = p.update(req.rel, (req.block, req.slot), req.data)
        return pb.TupleReply(block=block, slot=slot, found=True, lsn=p.write_lsn)

    def Delete(self, req: pb.TupleRequest, ctx) -> pb.TupleReply:
        p = self._primary()
        p.delete(req.rel, (req.block, req.slot))
        return pb.TupleReply(block=req.block, slot=req.slot, found=False, lsn=p.write_lsn)

    def Get(self, req: pb.TupleRequest, ctx) -> pb.TupleReply:
        node = self.holder.node
        data = node.get(req.rel, (req.block, req.slot))
        lsn = getattr(node, "applied_lsn", None)
        return pb.TupleReply(block=req.block, slot=req.slot, data=data or b"", found=data is not None,
                             lsn=node.write_lsn if lsn is None else lsn)

    def ReadPage(self, req: pb.PageRequest, ctx) -> pb.PageReply:
        if len(req.tag) != 5:
            from logtide.errors import InvalidRequest
            raise InvalidRequest("a PageTag has 5 fields")
        page, lsn = self.holder.node.read_page(tuple(req.tag))
        return pb.PageReply(page=page, lsn=lsn)

    def Status(self, req, ctx) -> pb.StatusReply:
        return pb.StatusReply(json=json.dumps(self.holder.status(), default=str))

    def Promote(self, req, ctx) -> pb.StatusReply:
        self.holder.promote()
        return pb.StatusReply(json=json.dumps(self.holder.status(), default=str))
