"""Callers that send their own batch (CallSlots.attach, _ext/socket_writer.pxd) against a model of
the connection's byte stream, on a real socket pair with small buffers: every call goes out once,
in a whole CALLS frame that passes its CRC; the loop's own frames keep their order among
themselves; a send that would block leaves its rest for the loop, which writes it before anything
else; every caller gets its own reply."""
from __future__ import annotations

import random
import select
import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide._ext import wire_codec as wc
from logtide._ext.call_slots import CallSlots
from logtide.engine.rpc.call_frames import pack_call, pack_reply, unpack_calls
from logtide.errors import RpcStreamBroken

pytestmark = pytest.mark.timeout(120)

K_CALLS, K_PING = wc.KINDS["CALLS"], wc.KINDS["PING"]


def _pair(buf: int) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf)
    return a, b


def _attached(slots: CallSlots, buf: int = 1 << 20):
    """(client end, server end, slots, notify eventfd): slots attached to a fresh socket pair, the
    writes released to callers, method 0 bound."""
    a, b = _pair(buf)
    efd = slots.open_notify()
    slots.attach(a.fileno())
    slots.release()
    slots.bind_methods(1)
    return a, b, slots, efd


def _calls_of(frame) -> list[tuple[int, int, bytes]]:
    """(id, method, request) of a decoded CALLS frame."""
    return [(cid, m, req) for m, ids, reqs in frame[1] for cid, req in zip(ids, reqs)]


class Peer(threading.Thread):
    """The server's end: reads slowly, checks every frame (FrameReader verifies each CRC), answers
    each call with b"re:" + its request and records what came, in order."""

    def __init__(self, sock: socket.socket, slots: CallSlots, rnd: random.Random) -> None:
        super().__init__(daemon=True)
        self.sock, self.slots, self.rnd = sock, slots, rnd
        self.reader = wc.FrameReader(1 << 24, preface=False)
        self.calls: list[tuple[int, int, bytes]] = []
        self.pings: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                data = self.sock.recv(self.rnd.choice((512, 4096, 65536)))
                if not data:
                    return
                if self.rnd.random() < 0.2:
                    time.sleep(0.002)       # a slow reader: the writer's sends would block
                for f in self.reader.feed(data):
                    if f[0] == K_CALLS:
                        calls = _calls_of(f)
                        self.calls += calls
                        self.slots.deliver(b"".join(pack_reply(cid, b"re:" + req) for cid, _, req in calls))
                    elif f[0] == K_PING:
                        self.pings.append(f[1])
                    else:
                        raise AssertionError(f"an unexpected frame {f!r}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class Loop:
    """The event loop's side, as the framed client does it: poll() for the batches the callers did
    not send, write() every frame through the slots, and a transport that writes what write() hands
    back (blocking here, so it is empty whenever it returns: then release())."""

    def __init__(self, sock: socket.socket, slots: CallSlots) -> None:
        self.sock, self.slots = sock, slots
        self.efd = slots.open_notify()
        self.loop_batches = 0
        self.rests = 0

    def transport(self, data: bytes | None) -> None:
        if data is not None:
            self.sock.sendall(data)
            self.rests += 1
        self.slots.release()

    def write(self, frame: bytes) -> None:
        self.transport(self.slots.write(frame))

    def turn(self, timeout: float) -> None:
        r = self.slots.poll()
        while r.__class__ is bytes:
            self.loop_batches += 1
            self.write(wc.encode_calls(r))
            r = self.slots.poll()
        if select.select([self.efd], [], [], min(timeout, r) if r >= 0 else timeout)[0]:
            self.slots.drain_notify()
            rest = self.slots.take_rest()
            if rest is not None:
                self.transport(rest)


@scaled(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 30000), st.sampled_from([4096, 16384, 1 << 20]),
       st.randoms(use_true_random=False))
def test_callers_and_the_loop_share_the_socket_in_order(threads, per_thread, size, buf, rnd):
    _share_the_socket(threads, per_thread, size, buf, random.Random(rnd.random()))


def _share_the_socket(threads, per_thread, size, buf, rnd) -> dict:
    """One run of the model above (rnd: drawn from by timing-dependent loops, so not hypothesis's);
    returns how many batches the callers and the loop sent, and how many rests the loop wrote."""
    a, b = _pair(buf)
    slots = CallSlots(0.001, 0.01, 64 << 10)
    slots.attach(a.fileno())
    peer = Peer(b, slots, random.Random(rnd.random()))
    peer.start()
    loop = Loop(a, slots)
    loop.transport(None)                      # the loop's transport holds nothing: callers may send
    slots.bind_methods(1)                     # method 1 is not bound yet: its calls wait for the loop
    results: dict = {}

    def caller(t: int) -> None:
        for k in range(per_thread):
            req = b"%d.%d:" % (t, k) + b"x" * rnd_sizes[t][k]
            results[(t, k)] = (req, slots.call(k % 2, req, 30.0))

    rnd_sizes = [[rnd.randint(0, size) for _ in range(per_thread)] for _ in range(threads)]
    ths = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(threads)]
    for th in ths:
        th.start()
    token = 0
    end = time.monotonic() + 60
    while any(th.is_alive() for th in ths):
        assert time.monotonic() < end, "the calls did not finish"
        assert peer.error is None, peer.error
        if rnd.random() < 0.3:
            token += 1
            loop.write(wc.encode_ping(token))  # a frame of the loop's own, between the callers'
        if token == 3:
            slots.bind_methods(2)
        loop.turn(0.002)
    a.shutdown(socket.SHUT_WR)
    slots.detach()
    peer.join(10)
    assert peer.error is None, peer.error
    assert len(results) == threads * per_thread
    for req, got in results.values():
        assert got == b"re:" + req
    ids = [cid for cid, _, _ in peer.calls]
    assert sorted(ids) == list(range(1, threads * per_thread + 1))   # each call once
    assert peer.pings == list(range(1, token + 1))                  # the loop's frames in order
    assert slots.direct_batches + loop.loop_batches >= 1
    a.close()
    b.close()
    return {"direct": slots.direct_batches, "loop": loop.loop_batches, "rests": loop.rests}


def test_large_batches_on_small_buffers_take_every_path():
    """The model above with batches larger than the socket's buffers: callers sent batches, the
    loop sent some (a batch completed while another was in flight), and sends that would have
    blocked left rests for the loop; every assertion of the model holds in each run."""
    seen = {"direct": 0, "loop": 0, "rests": 0}
    for seed in range(3):
        for k, v in _share_the_socket(4, 8, 30000, 4096, random.Random(seed)).items():
            seen[k] += v
    assert seen["direct"] > 0 and seen["loop"] > 0 and seen["rests"] > 0, seen


def test_a_send_that_would_block_leaves_its_rest_for_the_loop_first():
    """The peer does not read: a caller's batch larger than the socket's buffers goes out in part;
    the rest waits for the loop, which must write it before its own frame, and the peer then reads
    one whole CALLS frame and the loop's frame after it."""
    a, b, slots, efd = _attached(CallSlots(0.001, 0.01, 4 << 20), buf=4096)
    big = bytes(range(256)) * 4096             # 1 MiB: more than both buffers hold
    out: dict = {}
    th = threading.Thread(target=lambda: out.__setitem__(0, slots.call(0, big, 30.0)), daemon=True)
    th.start()
    assert select.select([efd], [], [], 10.0)[0] == [efd]   # the caller asked the loop for help
    slots.drain_notify()
    assert slots.direct_batches == 1
    # the loop owns the writes now: its frame waits behind the rest
    ping = wc.encode_ping(99)
    first = slots.write(ping)
    assert first is not None and first.endswith(ping) and len(first) > len(ping)
    assert slots.take_rest() is None          # write() handed the rest over already
    assert slots.write(wc.encode_ping(100)) == wc.encode_ping(100)   # nothing ahead of it now
    reader = wc.FrameReader(8 << 20, preface=False)
    frames = []

    def read_all():
        while True:
            d = b.recv(1 << 16)
            if not d:
                return
            frames.extend(reader.feed(d))
    rd = threading.Thread(target=read_all, daemon=True)
    rd.start()
    a.sendall(first + wc.encode_ping(100))    # the loop's transport
    a.shutdown(socket.SHUT_WR)
    rd.join(10)
    assert [f[0] for f in frames] == [K_CALLS, K_PING, K_PING]
    assert _calls_of(frames[0]) == [(1, 0, big)]
    assert [f[1] for f in frames[1:]] == [99, 100]
    slots.deliver(pack_reply(1, b"ok"))
    th.join(10)
    assert out[0] == b"ok"
    slots.detach()
    a.close()
    b.close()


def test_attached_a_returning_caller_wakes_no_one_and_the_linger_still_lets_its_batch_go():
    """Attached, replies leave the sender a timer (poll gives the linger's wait) instead of a wake
    by the first caller back; a call made while another caller stays away goes when the linger
    ends; callers that stay away longer than the linger count as gone; a batch completed while
    another batch's calls are in flight is the loop's to send."""
    a, b, slots, efd = _attached(CallSlots(0.05, 1.0, 1 << 20))
    results: dict = {}
    go = threading.Event()

    def caller(k):
        results[k] = slots.call(0, b"a%d" % k, 10.0)
        if k == 1:
            go.wait(10)
        results[k + 10] = slots.call(0, b"b%d" % k, 10.0)

    # the first batch: neither caller is returning, so the first call goes at once, sent by its
    # caller; the second goes with it or, if the first is in flight by then, through the loop
    ths = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(2)]
    for th in ths:
        th.start()
    reader = wc.FrameReader(1 << 20, preface=False)
    loop = Loop(a, slots)
    got = []
    end = time.monotonic() + 10
    while len(got) < 2:
        assert time.monotonic() < end
        loop.turn(0.001)
        if select.select([b], [], [], 0.001)[0]:
            got += [c for f in reader.feed(b.recv(65536)) for c in _calls_of(f)]
    assert slots.direct_batches >= 1
    assert slots.poll() == -1.0
    slots.deliver(b"".join(pack_reply(cid, b"r") for cid, _, _ in got))
    t0 = time.monotonic()
    w = slots.poll()                            # two callers returning, no call yet: a timer
    assert w.__class__ is float and 0 < w <= 0.05, w
    end = time.monotonic() + 5
    while slots.pending < 1:                    # caller 0 called again; caller 1 did not
        assert time.monotonic() < end
        time.sleep(0.001)
    assert select.select([efd], [], [], 0)[0] == []   # no wake-up: the timer covers it
    while True:
        r = slots.poll()
        if r.__class__ is bytes:
            break
        assert time.monotonic() - t0 < 5
        time.sleep(r)
    assert time.monotonic() - t0 >= 0.04       # it waited for the linger
    assert [d for _, _, d in unpack_calls(r)] == [b"b0"]
    assert slots.poll() == -1.0                 # the loop polls until it has to wait
    # caller 1 comes back late: it counts as gone, so its call is due at once; but b0's call is in
    # flight, so the loop is woken to send it (which gives the two batches a chance to merge)
    sent_before = slots.direct_batches
    go.set()
    assert select.select([efd], [], [], 5.0)[0] == [efd]
    slots.drain_notify()
    r2 = slots.poll()
    assert [d for _, _, d in unpack_calls(r2)] == [b"b1"]
    assert slots.direct_batches == sent_before
    cids = [c for c, _, _ in unpack_calls(r)] + [c for c, _, _ in unpack_calls(r2)]
    slots.deliver(b"".join(pack_reply(cid, b"s") for cid in cids))
    for th in ths:
        th.join(10)
    assert results == {0: b"r", 1: b"r", 10: b"s", 11: b"s"}
    slots.fail(RpcStreamBroken("done"))
    slots.detach()
    a.close()
    b.close()


def test_a_lone_returning_caller_needs_no_timer_and_sends_its_next_call_itself():
    """With one caller (a one-thread client), the replies leave the loop nothing to time: the
    caller's next call completes the batch, and it sends that itself, without waking the loop."""
    a, b, slots, efd = _attached(CallSlots(0.05, 1.0, 1 << 20))
    turn = threading.Event()
    results = []

    def caller():
        for i in range(4):
            turn.wait(10)
            turn.clear()
            results.append(slots.call(0, b"c%d" % i, 10.0))
    th = threading.Thread(target=caller, daemon=True)
    th.start()
    reader = wc.FrameReader(1 << 20, preface=False)
    for i in range(4):
        turn.set()
        got = []
        while not got:
            assert select.select([b], [], [], 10.0)[0], "the call was not sent"
            got = [c for f in reader.feed(b.recv(65536)) for c in _calls_of(f)]
        assert [d for _, _, d in got] == [b"c%d" % i]
        assert slots.direct_batches == i + 1
        slots.deliver(pack_reply(got[0][0], b"r%d" % i))
        assert slots.poll() == -1.0               # one caller returning: no timer
    th.join(10)
    assert results == [b"r0", b"r1", b"r2", b"r3"]
    assert select.select([efd], [], [], 0)[0] == []   # the loop was never woken
    slots.detach()
    a.close()
    b.close()


def test_detached_or_failed_the_loop_writes_everything():
    a, b = _pair(1 << 20)
    slots = CallSlots(0.001, 0.01, 1 << 20)
    slots.attach(a.fileno())
    assert slots.write(b"x") == b"x"            # until released, the transport may hold bytes
    slots.release()
    assert slots.write(wc.encode_ping(1)) is None
    assert b.recv(100) == wc.encode_ping(1)
    slots.detach()
    assert slots.write(b"y") == b"y"
    slots.release()                             # detached: release changes nothing
    assert slots.write(b"z") == b"z"
    results: dict = {}
    th = threading.Thread(target=lambda: results.__setitem__(0, slots.call(0, b"q", 10.0)), daemon=True)
    th.start()
    end = time.monotonic() + 5
    while True:                                 # the call is the loop's to send
        r = slots.poll()
        if r.__class__ is bytes:
            break
        assert time.monotonic() < end
        time.sleep(0.001)
    assert unpack_calls(r) == [(1, 0, b"q")]
    assert slots.direct_batches == 0
    slots.fail(RpcStreamBroken("gone"))
    th.join(10)
    assert isinstance(results[0], RpcStreamBroken)
    a.close()
    b.close()


def test_calls_over_a_real_connection_go_out_from_their_callers():
    """Through the framed client and server on loopback: a plaintext connection's callers send
    their batches themselves, between the stream frames that the loop writes, and every caller gets
    its own reply."""
    from logtide.engine.rpc import RpcClient
    from logtide.engine.rpc import diagnostics_pb2 as dpb
    from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
    from logtide.engine.rpc.wire_client import WireTransport
    from logtide.engine.rpc.wire_server import WireServer
    server = WireServer("127.0.0.1:0", max_message_size=1 << 20)
    server.add_service(DIAGNOSTICS, DiagnosticsServicer("direct"))
    server.start()
    try:
        with RpcClient(DIAGNOSTICS, WireTransport(server.address)) as c:
            out, errors = {}, []

            def pings(t):
                try:
                    out[t] = all(c.Ping(payload=b"%d-%d" % (t, i)).payload == b"%d-%d" % (t, i)
                                 for i in range(300))
                except Exception as exc:  # noqa: BLE001 - asserted below
                    errors.append(exc)

            def streams(t):
                try:
                    for _ in range(5):
                        reqs = [dpb.PingRequest(payload=b"s%d" % i) for i in range(60)]
                        out[("s", t)] = [m.payload for m in c.Echo(iter(reqs))] == [r.payload for r in reqs]
                except Exception as exc:  # noqa: BLE001 - asserted below
                    errors.append(exc)
            ths = [threading.Thread(target=pings, args=(t,)) for t in range(12)]
            ths += [threading.Thread(target=streams, args=(t,)) for t in range(2)]
            for th in ths:
                th.start()
            for th in ths:
                th.join(60)
            assert not errors, errors
            assert len(out) == 14 and all(out.values())
            assert c.transport.connection.slots.direct_batches > 0
    finally:
        server.stop(0)
