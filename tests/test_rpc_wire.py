"""The framed TCP carrier (engine/rpc/wire_*.py) on real loopback sockets: every call shape, typed
errors, deadlines against a SIGSTOPped server process, and bad bytes on the wire (each answered by
a GOAWAY naming its typed error and a logged close, while the server's other clients go on)."""
from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from logtide._ext import wire_codec as wc
from logtide._ext.crc32c import crc32c
from logtide.engine.rpc import RpcClient
from logtide.engine.rpc import diagnostics_pb2 as dpb
from logtide.engine.rpc.call_frames import pack_reply
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.wire_client import WireTransport
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import (BadWireMagic, DeadlineExceededError, FrameChecksumError, FrameTimeout, FrameTooLarge,
                            InvalidRange, InvalidRequest, MalformedFrame, MessageTooLarge, RemoteError, RpcError,
                            UnknownWireId)
from logtide_cli import logtide_cmd
from frozen import freeze

pytestmark = pytest.mark.timeout(120)
K = wc.KINDS
PING = "/logtide.rpc.Diagnostics/Ping"


class Servicer(DiagnosticsServicer):
    """Diagnostics, with failures on request: a payload of b"range" raises a typed error, b"bug" a plain one."""
    nonblocking_methods = frozenset()      # its Ping may sleep: it runs on the workers

    def __init__(self) -> None:
        super().__init__("wire-test")
        self.cancelled = threading.Event()

    def Ping(self, request, context):
        if request.payload == b"range":
            raise InvalidRange("no such LSN")
        if request.payload == b"bug":
            raise KeyError("oops")
        if request.payload == b"slow":
            time.sleep(0.5)
        return super().Ping(request, context)

    def Count(self, request, context):
        try:
            for i in range(request.n):
                if not context.is_active():
                    return
                if request.n > 1000 and i == 50:
                    time.sleep(0.2)          # the caller cancels meanwhile
                yield dpb.CountReply(i=i)
            if request.n == 7:
                raise InvalidRange("after seven")
        finally:    # stopped at is_active() or closed by the server while waiting for credit
            if not context.is_active():
                self.cancelled.set()


@pytest.fixture
def served():
    svc = Servicer()
    server = WireServer("127.0.0.1:0", max_message_size=1 << 20, frame_timeout=1.0)
    server.add_service(DIAGNOSTICS, svc)
    server.start()
    yield server, svc
    server.stop(0)


def client(server, **kw) -> RpcClient:
    return RpcClient(DIAGNOSTICS, WireTransport(server.address, **kw))


def test_every_call_shape_round_trips(served):
    server, _ = served
    with client(server) as c:
        r = c.Ping(payload=b"hello")
        assert (r.payload, r.server) == (b"hello", "wire-test")
        assert [m.i for m in c.Count(n=100)] == list(range(100))      # past the stream window: credit flows
        assert [m.payload for m in c.Echo(iter([dpb.PingRequest(payload=b"%d" % i) for i in range(80)]))] == \
            [b"%d" % i for i in range(80)]
        assert c.Sum(iter([dpb.CountReply(i=i) for i in range(70)])).i == sum(range(70))
        assert list(c.Count(n=0)) == []


def test_unary_calls_of_many_threads_batch_on_one_connection(served):
    server, _ = served
    with client(server) as c:
        out, errors = {}, []

        def work(t):
            try:
                for i in range(200):
                    p = b"%d-%d" % (t, i)
                    assert c.Ping(payload=p).payload == p
                out[t] = True
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        ths = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert not errors and len(out) == 16
        slots = c.transport.connection.slots
        assert slots.calls == 16 * 200 and slots.batches < slots.calls     # many calls per CALLS frame


def test_streams_opened_by_many_threads_at_once_on_one_connection(served):
    """Stream ids leave in the order they were taken (the server refuses one below the last opened,
    which once closed a shared connection when two threads raced)."""
    server, _ = served
    with client(server) as c:
        errors: list = []
        go = threading.Barrier(12)

        def work(t):
            try:
                go.wait(10)
                for i in range(40):
                    n = 2 + (t + i) % 5                # not 7: that Count fails on purpose
                    assert [m.i for m in c.Count(n=n)] == list(range(n))
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        ths = [threading.Thread(target=work, args=(t,)) for t in range(12)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert not errors, errors[:3]


def test_typed_errors_cross_the_wire(served):
    server, _ = served
    with client(server) as c:
        with pytest.raises(InvalidRange, match="no such LSN"):
            c.Ping(payload=b"range")
        with pytest.raises(RemoteError, match="KeyError"):
            c.Ping(payload=b"bug")
        with pytest.raises(InvalidRange, match="after seven"):
            list(c.Count(n=7))
        with pytest.raises(InvalidRequest):         # a method the server does not serve
            c.transport.call_bytes("/logtide.rpc.Diagnostics/Nope", b"")
        with pytest.raises(InvalidRequest):         # bytes that do not parse as the request
            c.transport.call_bytes(PING, b"\x0a\xff\xff\xff\xff\x0f\x01")
        with pytest.raises(MessageTooLarge):        # over the server's limit: refused before sending
            c.Ping(payload=b"x" * (2 << 20))
        assert c.Ping(payload=b"after").payload == b"after"    # the connection is still good


def test_deadline_and_cancel(served):
    server, svc = served
    with client(server) as c:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            c.Ping(payload=b"slow", timeout=0.1)
        assert time.monotonic() - t0 < 0.4
        stream = c.Count(n=100000)
        assert next(stream).i == 0
        stream.cancel()
        assert svc.cancelled.wait(5)                # the servicer saw is_active() turn False
        assert c.Ping(payload=b"ok").payload == b"ok"


def test_cancel_ends_a_read_that_waits_on_another_thread(served):
    """A thread blocked for a stream's next reply (no deadline: a long-lived stream) ends as at the
    stream's end when another thread cancels the stream, as over gRPC."""
    server, _ = served
    quiet = threading.Event()

    def requests():                                 # the server gets nothing, so it answers nothing
        quiet.wait(10)
        return
        yield
    with client(server) as c:
        stream = c.Echo(requests())
        got = []
        reader = threading.Thread(target=lambda: got.append(list(stream)))
        reader.start()
        time.sleep(0.2)
        assert reader.is_alive()
        stream.cancel()
        reader.join(5)
        quiet.set()
        assert not reader.is_alive() and got == [[]]
        assert c.Ping(payload=b"ok").payload == b"ok"


class OnLoop(DiagnosticsServicer):
    """Diagnostics whose Ping (a nonblocking method: it runs on the loop) records its thread."""

    def __init__(self) -> None:
        super().__init__("on-loop")
        self.threads: set[str] = set()

    def Ping(self, request, context):
        self.threads.add(threading.current_thread().name)
        if request.payload == b"range":
            raise InvalidRange("no such LSN")
        return super().Ping(request, context)


def _pings_from_threads(c, threads: int, each: int) -> None:
    """`threads` threads each send `each` Pings at once on one client; every reply must echo its payload."""
    out, errors = [], []

    def work(t):
        try:
            for i in range(each):
                p = b"%d-%d" % (t, i)
                out.append(c.Ping(payload=p).payload == p)
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
    ths = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors and len(out) == threads * each and all(out)


def test_nonblocking_methods_run_on_the_loop():
    svc = OnLoop()
    server = WireServer("127.0.0.1:0", max_message_size=1 << 20)
    server.add_service(DIAGNOSTICS, svc)
    server.start()
    try:
        assert server.on_loop == {PING}
        with client(server) as c:
            _pings_from_threads(c, threads=8, each=100)
            assert svc.threads == {"rpc-wire-loop"}
            with pytest.raises(InvalidRange, match="no such LSN"):   # a typed error from the loop too
                c.Ping(payload=b"range")
            with pytest.raises(InvalidRequest):                      # bytes that do not parse
                c.transport.call_bytes(PING, b"\x0a\xff\xff\xff\xff\x0f\x01")
            assert c.Sum(iter([dpb.CountReply(i=i) for i in range(5)])).i == 10   # streams: their own thread
            assert c.Ping(payload=b"after").payload == b"after"
    finally:
        server.stop(0)


@contextlib.contextmanager
def _deferring_server(servicer):
    """A server of `servicer` whose deferred calls expire after 1 s."""
    server = WireServer("127.0.0.1:0", max_message_size=1 << 20, deferred_timeout=1.0)
    server.add_service(DIAGNOSTICS, servicer)
    server.start()
    try:
        yield server
    finally:
        server.stop(0)


class Deferred(DiagnosticsServicer):
    """Diagnostics whose Ping is deferred: a thread of its own answers each batch later. Payload
    b"never" is never answered, b"range" fails typed, b"short" answers too few results, b"twice"
    calls done twice."""
    nonblocking_methods = frozenset()

    def __init__(self) -> None:
        super().__init__("deferred")
        self.threads: set[str] = set()
        self.pending: list = []
        self.cv = threading.Condition()
        self.answerer = threading.Thread(target=self._answer, name="deferred-answerer", daemon=True)
        self.answerer.start()

    def defer_Ping(self, reqs, ctx, done):
        self.threads.add(threading.current_thread().name)
        with self.cv:
            self.pending.append((reqs, done))
            self.cv.notify()

    def _answer(self):
        while True:
            with self.cv:
                while not self.pending:
                    self.cv.wait()
                reqs, done = self.pending.pop(0)
            if any(r.payload == b"never" for r in reqs):
                continue
            if any(r.payload == b"short" for r in reqs):
                done([])
                continue
            out = [InvalidRange("no such LSN") if r.payload == b"range" else dpb.PingReply(payload=r.payload)
                   for r in reqs]
            done(out)
            if any(r.payload == b"twice" for r in reqs):
                done([dpb.PingReply(payload=b"second")] * len(reqs))


def test_deferred_methods_answer_later_without_a_worker():
    """Deferred calls are started on the loop and answered from the servicer's own thread; a call
    never answered gets DeadlineExceededError at the server's deadline, and the server keeps serving."""
    svc = Deferred()
    with _deferring_server(svc) as server, client(server) as c:
        _pings_from_threads(c, threads=8, each=100)
        assert svc.threads == {"rpc-wire-loop"}                  # started on the loop, no worker
        with pytest.raises(InvalidRange, match="no such LSN"):
            c.Ping(payload=b"range")
        with pytest.raises(InvalidRequest):                      # bytes that do not parse
            c.transport.call_bytes(PING, b"\x0a\xff\xff\xff\xff\x0f\x01")
        with pytest.raises(RemoteError, match="answered 0 results for 1 calls"):
            c.Ping(payload=b"short")
        assert c.Ping(payload=b"twice").payload == b"twice"      # the second done is dropped
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="not answered within 1 s"):
            c.Ping(payload=b"never", timeout=10)
        assert time.monotonic() - t0 < 5
        assert c.Ping(payload=b"after").payload == b"after"


class DeferredFrames(DiagnosticsServicer):
    """Diagnostics whose Ping is a `defer_frames_` hook (raw request bytes in, packed reply frames
    out), answered by a thread of its own: the log service's shape. Payload b"never" is never
    answered, b"twice" is answered twice, b"raise" makes the hook raise, b"range" fails typed."""
    nonblocking_methods = frozenset()

    def __init__(self) -> None:
        super().__init__("deferred-frames")
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._answer, name="frames-answerer", daemon=True).start()

    def defer_frames_Ping(self, ids, datas, ctx, done):
        reqs = [dpb.PingRequest.FromString(d) for d in datas]
        if any(r.payload == b"raise" for r in reqs):
            raise KeyError("a servicer bug")
        self.pending.put((ids, reqs, done))

    def _answer(self):
        while True:
            ids, reqs, done = self.pending.get()
            if any(r.payload == b"never" for r in reqs):
                continue
            frames, failed = b"", []
            for i, r in zip(ids, reqs):
                if r.payload == b"range":
                    failed.append((i, InvalidRange("no such LSN")))
                else:
                    frames += pack_reply(i, dpb.PingReply(payload=r.payload).SerializeToString())
            done(frames, failed)
            if any(r.payload == b"twice" for r in reqs):
                done(pack_reply(ids[0], dpb.PingReply(payload=b"second").SerializeToString()), [])


def test_defer_frames_hook_answers_once_and_expires():
    """A frame of one `defer_frames_` method is answered by the hook's first done, once; a frame
    never answered gets DeadlineExceededError from the server's sweeper, and the server goes on."""
    with _deferring_server(DeferredFrames()) as server, client(server) as c:
        _pings_from_threads(c, threads=8, each=100)
        with pytest.raises(InvalidRange, match="no such LSN"):
            c.Ping(payload=b"range")
        assert c.Ping(payload=b"twice").payload == b"twice"      # the second done is dropped
        with pytest.raises(RemoteError, match="KeyError"):       # the hook's own failure
            c.Ping(payload=b"raise")
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="not answered within 1 s"):
            c.Ping(payload=b"never", timeout=10)
        assert 0.9 < time.monotonic() - t0 < 5
        assert c.Ping(payload=b"after").payload == b"after"
        _pings_from_threads(c, threads=4, each=50)
        deadline = time.monotonic() + 5
        while server.deferred and time.monotonic() < deadline:   # nothing kept once answered
            time.sleep(0.05)
        assert not server.deferred


def test_outstanding_frames_follow_the_frames_in_flight():
    """A frame stuck at the head of the deadline order does not keep the frames answered behind it:
    what the server keeps follows the frames in flight, not the rate; the stuck one still expires."""
    from logtide.engine.rpc.deferred_calls import FramesCall, Outstanding

    class Conn:
        peer_limit = 1 << 20
    finished: list = []
    out = Outstanding()
    # a deadline far beyond the loop below: on a loaded host 20,000 rounds can take seconds
    stuck = FramesCall(Conn(), [1], "/x", 10, 120.0, finished.append)
    out.add(stuck)
    for k in range(20_000):
        f = FramesCall(Conn(), [k + 2], "/x", 10, 0.5, finished.append)
        out.add(f)
        f.done(b"", [])
        out.answered(len(finished))
        finished.clear()
        assert out.kept <= 2 * len(out) + 1024
    assert len(out) == 1 and out.kept <= 1025
    out.expire(time.monotonic())                    # not yet due
    assert not finished
    out.expire(time.monotonic() + 121.0)
    assert finished == [stuck] and isinstance(stuck.failed[0][1], DeadlineExceededError)
    out.answered(1)
    assert len(out) == 0 and out.kept == 0


def test_connect_errors():
    with pytest.raises(RpcError, match="could not connect"):
        WireTransport("127.0.0.1:1", connect_timeout=0.5)
    with socket.socket() as so:                     # a listener that never speaks: the connect deadline ends it
        so.bind(("127.0.0.1", 0))
        so.listen()
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            WireTransport("127.0.0.1:%d" % so.getsockname()[1], connect_timeout=0.5)
        assert time.monotonic() - t0 < 3


# --- a SIGSTOPped server process -------------------------------------------------------------------


def test_deadlines_against_a_stopped_server_process(tmp_path):
    from logtide import connect_logservice
    p = subprocess.Popen(logtide_cmd() + ["logservice", "serve", "--dir", str(tmp_path / "log"), "--stats-interval", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, LOGTIDE_RPC_KEEPALIVE="1", LOGTIDE_RPC_KEEPALIVE_TIMEOUT="1"))
    try:
        line = p.stdout.readline()
        address = line.split(" on ")[1].split()[0]
        c = connect_logservice(address, timeout=1.0)
        assert c.append(b"before") == 1
        freeze(p.pid)       # returns once every thread has stopped
        failures = []

        def call():
            try:
                c.append(b"while stopped")
            except Exception as exc:  # noqa: BLE001 - asserted below
                failures.append(exc)
        t0 = time.monotonic()
        ths = [threading.Thread(target=call) for _ in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(10)
        assert len(failures) == 8 and all(isinstance(e, DeadlineExceededError) for e in failures), failures
        assert time.monotonic() - t0 < 1.0 + 3.0
        os.kill(p.pid, signal.SIGCONT)
        end = time.monotonic() + 10
        while True:                                 # thawed: the same client is answered again
            try:
                lsn = c.append(b"after")
                break
            except RpcError:
                assert time.monotonic() < end
                time.sleep(0.1)
        assert lsn >= 2
        c.close()
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()


# --- bad bytes on the wire -------------------------------------------------------------------------

def _raw(server, data: bytes, then_shut: bool = False, wait: float = 5.0) -> tuple[list, bool]:
    """Send `data` on a fresh connection; the frames the server sends back (its preface skipped) and
    whether it closed the connection."""
    with socket.create_connection((server.host, server.port), timeout=wait) as so:
        so.sendall(data)
        if then_shut:
            so.shutdown(socket.SHUT_WR)
        got, closed = b"", False
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                chunk = so.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                closed = True
                break
            got += chunk
    return wc.FrameReader(1 << 20).feed(got), closed


def _goaway_type(frames) -> str:
    ga = [f for f in frames if f[0] == K["GOAWAY"]]
    assert len(ga) == 1, frames
    return ga[0][2]


def _name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


PREFACE = wc.preface(1 << 20)


def _bad_crc() -> bytes:
    f = bytearray(wc.encode_methods(0, [PING]))
    f[-1] ^= 0xFF
    return bytes(f)


def _calls_cut_short() -> bytes:
    # a CALLS frame whose one call says its request is 100 bytes and carries 3: the CRC is right
    return wc.encode_frame(K["CALLS"], struct.pack("<QHI", 1, 0, 100) + b"abc")


CASES = {
    "garbage before the magic": (b"GET / HTTP/1.1\r\n\r\n", BadWireMagic, False),
    "oversized length": (PREFACE + struct.pack("<II", 0xFFFFFFF0, 0), FrameTooLarge, False),
    "bad CRC": (PREFACE + _bad_crc(), FrameChecksumError, False),
    "truncated frame (connection ends inside it)": (PREFACE + wc.encode_methods(0, [PING])[:-5], MalformedFrame, True),
    "truncated call inside a frame": (PREFACE + wc.encode_methods(0, [PING]) + _calls_cut_short(), MalformedFrame,
                                      False),
    "unknown method index": (PREFACE + wc.encode_calls(struct.pack("<QHI", 1, 7, 0)), UnknownWireId, False),
    "unknown stream id": (PREFACE + wc.encode_msg(99, b"x"), UnknownWireId, False),
    # a one-byte body of kind 0x7f, with its right CRC
    "unknown frame kind": (PREFACE + struct.pack("<II", 1, crc32c(b"\x7f")) + b"\x7f", MalformedFrame, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gets_a_typed_goaway_and_a_logged_close(served, caplog, case):
    server, _ = served
    data, err, shut = CASES[case]
    with client(server) as good:               # another client of the same server, busy throughout
        stop, answered, errors = threading.Event(), [], []

        def work():
            while not stop.is_set():
                try:
                    answered.append(good.Ping(payload=b"p").payload)
                except Exception as exc:  # noqa: BLE001 - asserted below
                    errors.append(exc)
                    return
        th = threading.Thread(target=work)
        th.start()
        try:
            end = time.monotonic() + 10
            while not answered and not errors and time.monotonic() < end:
                time.sleep(0.01)
            with caplog.at_level(logging.WARNING, logger="logtide.rpc.wire"):
                frames, closed = _raw(server, data, then_shut=shut)
            assert closed
            assert _goaway_type(frames) == _name(err)
            assert any(err.__name__ in r.getMessage() for r in caplog.records), caplog.records
            n = len(answered)
            time.sleep(0.2)
        finally:
            stop.set()
            th.join(10)
        assert not errors and len(answered) > n > 0      # the other client was answered throughout


def test_half_a_frame_then_silence_is_closed_after_the_frame_timeout(served, caplog):
    server, _ = served                       # frame_timeout=1.0
    with caplog.at_level(logging.WARNING, logger="logtide.rpc.wire"):
        t0 = time.monotonic()
        frames, closed = _raw(server, PREFACE + wc.encode_methods(0, [PING])[:6], wait=6.0)
    assert closed and 0.9 < time.monotonic() - t0 < 4.0
    assert _goaway_type(frames) == _name(FrameTimeout)
    with client(server) as c:
        assert c.Ping(payload=b"still serving").payload == b"still serving"


def test_a_client_that_does_not_read_its_replies_does_not_grow_the_server(served):
    """Calls keep coming but the replies are never read: the server stops reading that connection
    once its socket buffers fill, instead of queueing replies without bound."""
    server, _ = served
    req = dpb.PingRequest(payload=b"z" * 1000).SerializeToString()
    call = wc.encode_calls(b"".join(struct.pack("<QHI", i, 0, len(req)) + req for i in range(1, 200)))
    with socket.create_connection((server.host, server.port)) as so:
        so.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        so.sendall(PREFACE + wc.encode_methods(0, [PING]))
        so.settimeout(0.2)
        sent = 0
        try:
            for _ in range(5000):            # 1 GB if the server kept taking them
                so.sendall(call)
                sent += 1
        except (socket.timeout, BlockingIOError):
            pass
        assert sent < 5000                    # the server stopped reading: the client's sends block
        conns = [c for c in server.conns if c.read_paused]
        assert conns and conns[0].write_paused
    with client(server) as c:
        assert c.Ping(payload=b"others go on").payload == b"others go on"


def test_a_forked_child_opens_its_own_connection(tmp_path):
    """Unlike gRPC (tests/test_rpc_fork_guard.py), a framed client inherited across fork() works in
    the child: the child starts its own loop and connection; the parent's calls go on."""
    import json
    from logtide import connect_logservice
    from logtide.engine.logservice.rpc_service import LogServiceServer
    with LogServiceServer.open(tmp_path / "log") as server, connect_logservice(server.address) as c:
        assert c.append(b"parent before") == 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)
            try:
                out = {"lsn": c.append(b"child")}
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                out = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            out = json.loads(f.read() or b"{}")
        os.waitpid(pid, 0)
        assert out.get("lsn") == 2, out
        assert c.append(b"parent after") == 3
