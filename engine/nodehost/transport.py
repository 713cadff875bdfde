"""RaftTransport: carries Raft messages between replicas over the RPC layer: the framed carrier to a
"host:port" (docs/rpc.md, "The framed carrier"; served by WireServer), or in-process.

Replication is streamed. Each peer gets one long-lived stream (RaftTransport.Stream in raft.proto):
its sender thread writes everything queued for the peer since its last write as one RaftBatch, so
while one batch is on the wire the next builds up. When that thread is idle (nothing queued, its
last batch written) and the stream has credit, the driver writes its messages itself, as the next
batch: waking the sender thread for each round of a busy leader costs two context switches. The receiver acknowledges batches by seq on the
same stream, at least every ACK_EVERY and for every keepalive (an empty batch the sender writes
after KEEPALIVE of silence). A watchdog cancels a stream whose oldest unacknowledged batch is older
than ACK_TIMEOUT (a peer that is stopped, cut off or wedged keeps its TCP connection open, so only
the application sees it): the peer is reported unreachable (the leader falls back to probing), the
messages queued for it are dropped (Raft tolerates loss; nothing is held for a stream that is not
known to work), and a new stream on a new connection replaces it, with backoff. A connection is
opened within CONNECT_TIMEOUT or the attempt counts as failed (a stopped peer's kernel still
accepts it; only the peer's missing preface tells).

Elections travel apart from the stream: votes, pre-votes, their answers and timeout-now go as
unary Send calls on their own connection and thread (CONTROL_TYPES), so a stream being replaced,
a full queue or a large snapshot on the wire never delays an election.

Received batches are decoded and checked here (CRC, types, sender, group) before the driver sees
them; a bad message is dropped with a logged reason and counted, and the stream goes on. A frame
that is not a RaftBatch at all ends that stream with a typed error (logged on both sides); the
sender opens a new one. On a server whose TLS has peer_ids, a batch is also dropped unless the
sender's certificate names the node it claims to come from (raft_id_uri, in any group or in this
one): a holder of another certificate from the same CA cannot speak for a member.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.nodehost.channel import connect_replica
from logtide.engine.nodehost.entry_encodings import EntryEncodings
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage, RaftError, UnknownPeer
from logtide.engine.raft.messages import Message
from logtide._ext.raft_wire_bytes import batch_bytes
from logtide.engine.raft.wire import decode_message, encode_message, message_wire
from logtide.engine.rpc import ServiceDef, connect
from logtide.errors import ConnectionRefused, InvalidRequest, LogtideError

log = logging.getLogger("logtide.raft")

RAFT_SERVICE = ServiceDef.from_proto(pb, "RaftTransport")
# elections: never behind replication traffic, never behind a stream being replaced
CONTROL_TYPES = frozenset((M.VOTE, M.VOTE_RESP, M.PRE_VOTE, M.PRE_VOTE_RESP, M.TIMEOUT_NOW, M.TRANSFER_LEADER))
QUEUE_MESSAGES = 8192       # messages waiting per peer before new ones are dropped
MAX_BATCH_MESSAGES = 4096   # messages in one RaftBatch
MAX_BATCH_BYTES = 8 << 20   # entry and snapshot bytes in one RaftBatch (a larger single message goes alone)
KEEPALIVE = 0.25            # seconds of silence after which a stream writes an empty batch
ACK_EVERY = 0.1             # the receiver acknowledges at least this often while batches arrive
ACK_TIMEOUT = 1.0           # seconds without an acknowledgement, while a batch waits for one, before its stream counts as stuck
ACK_BYTES_PER_S = 4 << 20   # ... plus the oldest waiting batch's bytes at this rate (a snapshot takes longer)
WATCH_INTERVAL = 0.05       # how often the watchdog looks at the streams
CONTROL_TIMEOUT = 1.0       # deadline of one election call (an answer later than an election timeout is useless)
CONNECT_TIMEOUT = 1.0       # seconds to open a connection to a peer (its preface included)
MIN_BACKOFF = 0.01
MAX_BACKOFF = 0.5           # seconds between attempts to reach an unreachable peer
IDLE_POLL = 0.2             # how often an idle control sender checks for close()


def _size(m: Message) -> int:
    n = 64
    for e in m.entries:
        n += len(e.data) + 24
    if m.snapshot is not None:
        n += len(m.snapshot.data)
    return n


class _Queue:
    """The messages waiting for one peer (bounded; a full queue drops, as Raft tolerates loss)."""

    def __init__(self) -> None:
        self.cv = threading.Condition(threading.Lock())
        self.items: deque[Message] = deque()
        self.closed = False

    def put(self, msgs: list[Message]) -> bool:
        with self.cv:
            if len(self.items) + len(msgs) > QUEUE_MESSAGES:
                return False
            self.items.extend(msgs)
            self.cv.notify_all()  # a killed stream's feed may be waiting too: wake the live one for sure
            return True

    def take(self) -> tuple[list[Message], int]:
        """Everything queued, up to one batch (the caller holds cv and saw items)."""
        items, out, size = self.items, [], 0
        while items and len(out) < MAX_BATCH_MESSAGES:
            n = _size(items[0])
            if out and size + n > MAX_BATCH_BYTES:
                break
            out.append(items.popleft())
            size += n
        return out, size

    def clear(self) -> int:
        with self.cv:
            n = len(self.items)
            self.items.clear()
            return n

    def close(self) -> None:
        with self.cv:
            self.closed = True
            self.cv.notify_all()


class _Feed:
    """The request side of one stream (the client's request thread iterates it): the queued messages as
    numbered batches, a keepalive after KEEPALIVE of silence; it ends once the stream is killed, so a
    dead stream never takes messages that a new one should carry."""

    def __init__(self, peer: "_Peer") -> None:
        self.peer = peer
        self.seq = 0
        self.acked = 0
        self.unacked: deque[tuple[int, float, int, int]] = deque()  # (seq, sent at, bytes, messages)
        self.last_ack_at = 0.0
        self.last_write = 0.0           # 0: the first write is a keepalive, so a new stream is proven at once
        self.dead: str | None = None    # why the stream was killed
        self.call: Any = None           # the ResponseStream, once open
        self.idle = False               # the request thread waits for messages (its last batch is written)

    def __iter__(self) -> "_Feed":
        return self

    def __next__(self) -> pb.RaftBatch:
        p = self.peer
        q = p.q
        with q.cv:
            while True:
                if self.dead is not None or q.closed:
                    raise StopIteration
                if q.items:
                    msgs, size = q.take()
                    break
                idle = time.monotonic() - self.last_write
                if idle >= KEEPALIVE:
                    msgs, size = [], 0
                    break
                self.idle = True
                q.cv.wait(KEEPALIVE - idle)
                self.idle = False
        batch = self._batch(msgs)
        with q.cv:
            self._numbered(batch, size, len(msgs))
        return batch

    def _batch(self, msgs: list[Message]) -> pb.RaftBatch:
        p = self.peer
        if not msgs:
            return pb.RaftBatch(cluster=p.t.cluster_id, frm=p.t.node_id)
        return pb.RaftBatch.FromString(self._wire(msgs, 0))

    def _wire(self, msgs: list[Message], seq: int) -> bytes:
        """The serialized RaftBatch of `msgs`, in C from each entry's cached bytes (no protobuf
        object per entry)."""
        p = self.peer
        entry_bytes = p.t.encodings.get
        return batch_bytes(p.t.cluster_id, p.t.node_id, [message_wire(m, entry_bytes) for m in msgs], seq)

    def _numbered(self, batch: pb.RaftBatch, size: int, n: int) -> None:
        """Give `batch` the next seq and wait for its acknowledgement (the caller holds q.cv)."""
        batch.seq = self._note_sent(size, n)

    def _note_sent(self, size: int, n: int) -> int:
        """The next seq, for a batch of n messages about to be written (the caller holds q.cv)."""
        now = time.monotonic()
        self.seq += 1
        self.unacked.append((self.seq, now, size, n))
        self.last_write = now
        self.peer.t.sent += n
        self.peer.batches += 1
        return self.seq

    def send_now(self, msgs: list[Message]) -> bool:
        """Write `msgs` as the next batch from the caller's thread, if the request thread is idle
        and the stream takes it at once (so batches keep their order); False: queue them."""
        call = self.call
        if call is None or not self.idle:    # a busy request thread: queue without sizing the batch
            return False
        q = self.peer.q
        size = sum(_size(m) for m in msgs)
        if len(msgs) > MAX_BATCH_MESSAGES or size > MAX_BATCH_BYTES:
            return False
        with q.cv:
            if not self.idle or q.items or self.dead is not None or q.closed:
                return False
            seq = self.seq
            data = self._wire(msgs, seq + 1)    # serialized once: no batch object to serialize again
            self._note_sent(size, len(msgs))
            if call.try_send_bytes(data):
                return True
            self.seq = seq                # not written: the request thread sends these messages
            self.unacked.pop()
            self.peer.t.sent -= len(msgs)
            self.peer.batches -= 1
            return False

    def ack(self, seq: int) -> None:
        with self.peer.q.cv:
            if seq > self.acked:
                self.acked = seq
            self.last_ack_at = time.monotonic()
            u = self.unacked
            while u and u[0][0] <= seq:
                u.popleft()

    def overdue(self, now: float) -> float:
        """Seconds past the deadline of the oldest unacknowledged batch (<= 0: in time). A receiver
        that keeps acknowledging is alive however far behind it is; a stopped one acknowledges nothing."""
        with self.peer.q.cv:
            if not self.unacked:
                return 0.0
            _seq, sent, size, _n = self.unacked[0]
            return now - max(sent, self.last_ack_at) - ACK_TIMEOUT - size / ACK_BYTES_PER_S

    def kill(self, why: str) -> None:
        with self.peer.q.cv:
            if self.dead is None:
                self.dead = why
            self.peer.q.cv.notify_all()
        call = self.call
        # over the network, cancel: the peer may never answer again (a cancel also wakes the reader
        # of the acknowledgements). In-process, the stream ends by itself once the feed stops (the
        # in-process transport hands a cancelled stream no end marker)
        if call is not None and isinstance(self.peer.target, str):
            call.cancel()


class _Peer:
    """The stream to one peer (its sender thread reads the acknowledgements), and the control lane."""

    def __init__(self, transport: "RaftTransport", peer_id: int, target: Any) -> None:
        self.t = transport
        self.id = peer_id
        self.target = target
        self.q = _Queue()
        self.ctl = _Queue()
        self.feed: _Feed | None = None
        self.closed = False
        self.connected = False
        self.streams = 0        # streams opened
        self.batches = 0        # batches written (keepalives included)
        self.stalls = 0         # streams the watchdog found stuck
        self.thread = threading.Thread(target=self._run, name=f"raft-{transport.node_id}-to-{peer_id}", daemon=True)
        self.ctl_thread = threading.Thread(target=self._run_control, name=f"raft-{transport.node_id}-vote-{peer_id}",
                                           daemon=True)
        self.thread.start()
        self.ctl_thread.start()

    def _client(self, timeout: float | None):
        """A client of the peer; over the network its connection is open (or this raised)."""
        if isinstance(self.target, str):
            return connect_replica(RAFT_SERVICE, self.target, timeout=timeout, connect_timeout=CONNECT_TIMEOUT)
        return connect(RAFT_SERVICE, self.target)

    def _run(self) -> None:
        backoff = MIN_BACKOFF
        while not self.closed:
            feed = _Feed(self)
            client = None
            why = ""
            try:
                client = self._client(None)  # a stream has no deadline: the watchdog and keepalives watch it
                self.feed = feed
                self.streams += 1  # before the call: its sender thread may deliver before Stream() returns
                feed.call = client.Stream(feed)
                if feed.dead is not None:
                    feed.call.cancel()
                for ack in feed.call:
                    feed.ack(ack.seq)
                    if not self.connected:
                        self.connected = True
                        log.info("raft %d: stream to %d is up", self.t.node_id, self.id)
                    backoff = MIN_BACKOFF
                why = "the peer ended the stream"
            except (LogtideError, OSError, RuntimeError, ValueError) as exc:
                why = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, ConnectionRefused):
                    self.t.gone(self.id)     # nothing listens there: the peer's process is gone
            finally:
                self.feed = None
                feed.kill(why)
                if client is not None:
                    client.close()  # a new connection next: the old one may be the stuck part
            if self.closed:
                break
            why = feed.dead or why
            lost = sum(u[3] for u in feed.unacked) + self.q.clear()
            if self.connected or lost:
                log.info("raft %d: stream to %d failed (%s); %d messages dropped", self.t.node_id, self.id, why, lost)
            self.connected = False
            self.t.dropped += lost
            self.t.unreachable(self.id)
            time.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)

    def watch(self, now: float) -> None:
        feed = self.feed
        if feed is not None and feed.dead is None:
            late = feed.overdue(now)
            if late > 0:
                self.stalls += 1
                self.t.stalls += 1
                feed.kill(f"no acknowledgement for {late + ACK_TIMEOUT:.2f} s")

    def _run_control(self) -> None:
        client = None
        q = self.ctl
        while not self.closed:
            with q.cv:
                while not q.items and not q.closed:
                    q.cv.wait(IDLE_POLL)
                if q.closed:
                    break
                msgs, _size = q.take()
            batch = pb.RaftBatch(cluster=self.t.cluster_id, frm=self.t.node_id,
                                 messages=[encode_message(m) for m in msgs])
            try:
                if client is None:
                    client = self._client(CONTROL_TIMEOUT)
                client.Send(batch, timeout=CONTROL_TIMEOUT)
                self.t.sent += len(msgs)
            except (LogtideError, OSError, RuntimeError, ValueError) as exc:
                # an election message lost: the election times out and runs again
                self.t.dropped += len(msgs)
                log.debug("raft %d: election message to %d lost: %s", self.t.node_id, self.id, exc)
                if client is not None:
                    client.close()
                    client = None
        if client is not None:
            client.close()

    def send(self, msgs: list[Message]) -> bool:
        ctl = [m for m in msgs if m.type in CONTROL_TYPES]
        if ctl:
            data = [m for m in msgs if m.type not in CONTROL_TYPES]
            ok = self.ctl.put(ctl)
            return (self.q.put(data) if data else True) and ok
        feed = self.feed
        if feed is not None and feed.send_now(msgs):
            return True
        return self.q.put(msgs)

    def close(self) -> None:
        self.closed = True
        self.q.close()
        self.ctl.close()
        feed = self.feed
        if feed is not None:
            feed.kill("closed")


def raft_id_uri(node_id: int, group: int | None = None) -> str:
    """The certificate name (a URI in subjectAltName) that proves Raft node id `node_id` to peers
    whose TLS has peer_ids: `logtide:raft:<group>:<id>` in Raft group `group` only, and
    `logtide:raft:<id>` (group None) in every group whose peers trust the same CA."""
    return f"logtide:raft:{node_id}" if group is None else f"logtide:raft:{group}:{node_id}"


class _Receiver:
    """The receiving end of one stream: delivers each batch, and says which to acknowledge (at least
    every ACK_EVERY, and every keepalive)."""

    def __init__(self, transport: "RaftTransport", peer: str, names: frozenset[str] | None = None) -> None:
        self.t = transport
        self.peer = peer
        self.names = names            # the sender's certificate's URI names, when they are checked
        self.last_ack = 0.0

    def take(self, batch: pb.RaftBatch) -> pb.RaftAck | None:
        if batch.messages:
            self.t.receive(batch, self.names)
        now = time.monotonic()
        if not batch.messages or now - self.last_ack >= ACK_EVERY:
            self.last_ack = now
            return pb.RaftAck(seq=batch.seq)
        return None

    def malformed(self, exc: InvalidRequest) -> None:
        """A frame that is not a RaftBatch: this stream is unusable (the sender opens a new one)."""
        self.t.refuse(MalformedMessage(f"a frame on the stream from {self.peer}: {exc}"))


class _LoopReceiver(_Receiver):
    """A stream received on the framed server's loop (WireServer's open_<Method>)."""

    def __init__(self, transport: "RaftTransport", peer: str, reply, names: frozenset[str] | None) -> None:
        super().__init__(transport, peer, names)
        self.reply = reply

    def on_request(self, batch: pb.RaftBatch) -> None:
        ack = self.take(batch)
        if ack is not None:
            self.reply(ack)

    def on_error(self, exc: InvalidRequest) -> None:
        self.malformed(exc)

    def on_end(self) -> None:
        pass


class _Servicer:
    def __init__(self, transport: "RaftTransport") -> None:
        self.t = transport

    def Send(self, batch, context) -> pb.RaftAck:
        return pb.RaftAck(messages=self.t.receive(batch, context.peer_uris))

    def Stream(self, batches, context):
        # a sender that cancels the stream (it replaces one it found stuck) or goes away ends
        # `batches`: the loop just stops
        r = _Receiver(self.t, context.peer, context.peer_uris)
        try:
            for batch in batches:
                ack = r.take(batch)
                if ack is not None:
                    yield ack
        except InvalidRequest as exc:
            r.malformed(exc)
            raise

    def open_Stream(self, context, reply) -> _LoopReceiver:
        """Stream, served on the framed server's event loop: decoding and delivering a batch there
        costs no thread wake-up (the driver's inbox is the one hand-off)."""
        return _LoopReceiver(self.t, context.peer, reply, context.peer_uris)


class RaftTransport:
    """One replica's transport. `deliver(messages)` gets every valid batch received (on the framed
    server's event loop: it must hand them on and never block);
    `on_unreachable(peer)` hears of failed streams, `on_gone(peer)` of a peer whose address refused
    a connection (its process is gone, not just slow). Serve `servicer` under RAFT_SERVICE on a
    WireServer (peers reach a "host:port" over the framed carrier)."""

    def __init__(self, node_id: int, cluster_id: int, deliver: Callable[[list[Message]], None],
                 on_unreachable: Callable[[int], None] | None = None,
                 on_gone: Callable[[int], None] | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._deliver = deliver
        self._on_unreachable = on_unreachable
        self._on_gone = on_gone
        self.servicer = _Servicer(self)
        self.encodings = EntryEncodings()   # each entry encoded once for all followers
        self._peers: dict[int, _Peer] = {}
        self._lock = threading.Lock()
        self.sent = self.dropped = self.received = self.rejected = self.stalls = 0
        self.errors: deque[RaftError] = deque(maxlen=64)  # the latest refusals, for status and tests
        self._closed = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"raft-{node_id}-watchdog", daemon=True)
        self._watchdog.start()

    def set_peer(self, peer_id: int, target: Any) -> None:
        """Reach `peer_id` at "host:port" (the framed carrier) or through a servicer object (in-process)."""
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

    def peer_stats(self, peer_id: int) -> dict:
        """The stream to `peer_id`: whether it is up, streams opened, stalls detected, batches written."""
        p = self._peers[peer_id]
        return {"connected": p.connected, "streams": p.streams, "stalls": p.stalls, "batches": p.batches}

    def send(self, messages: list[Message]) -> None:
        by_peer: dict[int, list] = {}
        for m in messages:
            by_peer.setdefault(m.to, []).append(m)
        for to, msgs in by_peer.items():
            p = self._peers.get(to)
            if p is None or not p.send(msgs):
                self.dropped += len(msgs)
                if p is not None:
                    self.unreachable(to)

    def unreachable(self, peer_id: int) -> None:
        if self._on_unreachable is not None:
            try:
                self._on_unreachable(peer_id)
            except Exception:  # noqa: BLE001 - a sender thread must outlive a failing callback
                log.exception("raft %d: reporting peer %d unreachable failed", self.node_id, peer_id)

    def gone(self, peer_id: int) -> None:
        if self._on_gone is not None:
            try:
                self._on_gone(peer_id)
            except Exception:  # noqa: BLE001 - a sender thread must outlive a failing callback
                log.exception("raft %d: reporting peer %d gone failed", self.node_id, peer_id)

    def receive(self, batch: pb.RaftBatch, names: frozenset[str] | None = None) -> int:
        """Check and deliver a received batch; returns how many messages were accepted. names: the
        URI names of the sender's certificate, when the server checks them (TLS with peer_ids): the
        batch must then come from a node they name (raft_id_uri)."""
        if batch.cluster != self.cluster_id:
            self.refuse(UnknownPeer(f"a batch for Raft group {batch.cluster} from node {batch.frm}; "
                                     f"this is group {self.cluster_id}"))
            return 0
        if names is not None and not (raft_id_uri(batch.frm) in names
                                      or raft_id_uri(batch.frm, self.cluster_id) in names):
            named = ", ".join(sorted(names)) or "no URI"
            self.refuse(UnknownPeer(f"a batch claiming node {batch.frm} over a connection whose certificate "
                                     f"names {named}, not {raft_id_uri(batch.frm)} "
                                     f"(nor {raft_id_uri(batch.frm, self.cluster_id)})"))
            return 0
        if batch.frm not in self._peers:
            self.refuse(UnknownPeer(f"a batch from node {batch.frm}, which is not a known member"))
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
                self.refuse(exc)
        if out:
            self.received += len(out)
            self._deliver(out)
        return len(out)

    def refuse(self, exc: RaftError) -> None:
        self.rejected += 1
        self.errors.append(exc)
        log.warning("raft %d: refused a message: %s", self.node_id, exc)

    def _watch(self) -> None:
        while not self._closed.wait(WATCH_INTERVAL):
            now = time.monotonic()
            for p in list(self._peers.values()):
                p.watch(now)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            peers, self._peers = list(self._peers.values()), {}
        for p in peers:
            p.close()
        for p in peers:
            p.thread.join(timeout=2)
            p.ctl_thread.join(timeout=2)
