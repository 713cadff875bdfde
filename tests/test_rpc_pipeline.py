"""Pipelined unary calls (engine/rpc/pipeline.py): many threads share one stream, replies are matched
by id, bad calls get their own typed error, every call has a deadline, and a stopped or killed
server ends every call in flight with a typed error, never a hang."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from logtide.engine.rpc import RpcServer, connect
from logtide.engine.rpc import diagnostics_pb2 as pb
from logtide.engine.rpc import pipeline_pb2 as ppb
from logtide.engine.rpc.call_frames import CALL_HEADER, pack_call, unpack_replies
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.pipeline import PipelinedTransport
from logtide.engine.rpc.pipeline_server import PIPELINE_PATH
from logtide.errors import (InvalidRange, MessageTooLarge, RemoteError, DeadlineExceededError, RpcError,
                            RpcStreamBroken)

pytestmark = pytest.mark.timeout(120)


class Service(DiagnosticsServicer):
    """Ping echoes; some payloads fail, sleep, or ask for a reply bigger than the message limit."""

    def __init__(self):
        super().__init__("pipe")
        self.batches: list[int] = []

    def Ping(self, request, context):
        p = request.payload
        if p == b"range":
            raise InvalidRange("beyond the end of the log")
        if p == b"bug":
            raise KeyError("a bug")
        if p == b"sleep":
            time.sleep(1.5)
        if p == b"huge":
            return pb.PingReply(payload=b"h" * (2 << 20), server="pipe")
        return super().Ping(request, context)


@pytest.fixture(params=[False, True], ids=["reader", "inline"])
def served(request):
    svc = Service()
    s = RpcServer("127.0.0.1:0", max_message_size=1 << 20)
    s.pipeline.inline = request.param  # the stream's worker runs the batches itself (the replicated log's mode)
    s.add_service(DIAGNOSTICS, svc)
    s.start()
    yield s, svc
    s.stop(grace=0)


def test_many_threads_share_one_stream_and_get_their_own_replies(served):
    server, _ = served
    errors, threads, per = [], 16, 150
    with connect(DIAGNOSTICS, server.address, pipelined=True) as c:
        def work(t):
            try:
                for i in range(per):
                    want = b"%d/%d" % (t, i)
                    assert c.Ping(payload=want).payload == want
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)
        ths = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert not errors
        stream = c.transport.stream
        assert isinstance(c.transport, PipelinedTransport)
        assert stream.calls_sent == threads * per     # every call went on the one stream, none unary
        assert stream.batches_sent < stream.calls_sent  # and concurrent calls shared messages
        assert not stream.inflight


def test_one_bad_call_does_not_disturb_the_others(served):
    server, _ = served
    with connect(DIAGNOSTICS, server.address, pipelined=True) as c:
        out = {}

        def call(name, payload):
            try:
                out[name] = c.Ping(payload=payload).payload
            except Exception as exc:  # noqa: BLE001 - compared below
                out[name] = exc
        ths = [threading.Thread(target=call, args=(n, p)) for n, p in
               [("ok1", b"a"), ("range", b"range"), ("bug", b"bug"), ("huge", b"huge"), ("ok2", b"b")]]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert out["ok1"] == b"a" and out["ok2"] == b"b"
        assert isinstance(out["range"], InvalidRange) and "beyond the end" in str(out["range"])
        assert isinstance(out["bug"], RemoteError) and "KeyError" in str(out["bug"])
        assert isinstance(out["huge"], MessageTooLarge)  # the reply is over the server's 1 MiB limit
        with pytest.raises(MessageTooLarge):             # a request over it travels unary: refused as before
            c.Ping(payload=b"x" * (2 << 20))
        assert c.Ping(payload=b"still").payload == b"still"


def _frames(*calls) -> bytes:
    return b"".join(pack_call(i, m, req) for i, m, req in calls)


def test_malformed_calls_and_frames(served):
    server, _ = served
    methods = ["/logtide.rpc.Diagnostics/Ping", "/logtide.rpc.Diagnostics/Nope", "/logtide.rpc.Diagnostics/Count"]
    with grpc.insecure_channel(server.address) as ch:
        call = ch.stream_stream(PIPELINE_PATH)
        batch = ppb.CallBatch(methods=methods, frames=_frames(
            (1, 0, b"\x0a\xff\xff\xff\xff\x0f"),         # a request that does not parse
            (2, 1, b""),                                    # an unknown method
            (3, 2, b""),                                    # streaming: not on the pipeline
            (5, 7, b""),                                    # a method index past the batch's table
            (4, 0, pb.PingRequest(payload=b"fine").SerializeToString())))
        errors, ok = {}, {}
        for raw in call(iter([batch.SerializeToString()]), timeout=10):
            rb = ppb.ReplyBatch.FromString(raw)
            errors.update((r.id, r) for r in rb.errors)
            ok.update(unpack_replies(rb.frames))
        assert sorted(errors) == [1, 2, 3, 5] and sorted(ok) == [4]
        for i in (1, 2, 3, 5):
            assert errors[i].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
            assert errors[i].error_type == "logtide.errors.InvalidRequest"
        assert "malformed" in errors[1].details and "unknown method" in errors[2].details
        assert "unknown method" in errors[5].details
        assert pb.PingReply.FromString(ok[4]).payload == b"fine"
        whole = _frames((1, 0, pb.PingRequest(payload=b"x").SerializeToString()))
        bad_frames = [
            b"\x0a\xff\xff\xff\xff\x0f",                               # not a CallBatch at all
            ppb.CallBatch(methods=methods, frames=whole[:-1]).SerializeToString(),        # truncated request
            ppb.CallBatch(methods=methods, frames=whole + b"\x01\x02").SerializeToString(),  # truncated header
            ppb.CallBatch(methods=methods,                                               # length past the end
                          frames=CALL_HEADER.pack(9, 0, 1 << 31) + b"abc").SerializeToString(),
        ]
        for bad in bad_frames:
            with pytest.raises(grpc.RpcError) as e:       # the stream ends with INVALID_ARGUMENT
                list(call(iter([bad]), timeout=10))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "malformed CallBatch" in e.value.details()
    with connect(DIAGNOSTICS, server.address, pipelined=True) as c:  # the server keeps serving
        assert c.Ping(payload=b"alive").payload == b"alive"


def test_deadline_of_one_call(served):
    server, _ = served
    with connect(DIAGNOSTICS, server.address, pipelined=True) as c:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            c.Ping(payload=b"sleep", timeout=0.3)
        assert time.monotonic() - t0 < 1.2
        assert c.Ping(payload=b"next").payload == b"next"   # the stream is still usable
        time.sleep(1.5)                                      # the late reply arrives and is dropped
        assert c.Ping(payload=b"after").payload == b"after" and not c.transport.stream.inflight


def test_server_stop_breaks_the_stream_and_the_next_call_reconnects():
    svc = Service()
    s = RpcServer("127.0.0.1:0")
    s.add_service(DIAGNOSTICS, svc)
    port = s.start()
    c = connect(DIAGNOSTICS, s.address, pipelined=True)
    assert c.Ping(payload=b"1").payload == b"1"
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", _catch(lambda: c.Ping(payload=b"sleep"))))
    th.start()
    time.sleep(0.3)
    s.stop(grace=0)                            # cancels the stream under the in-flight call
    th.join(10)
    assert isinstance(out["r"], RpcError)
    with pytest.raises(RpcError):              # nobody listens: a clear error, not a hang
        c.Ping(payload=b"2", timeout=2)
    s2 = RpcServer(f"127.0.0.1:{port}")
    s2.add_service(DIAGNOSTICS, Service())
    s2.start()
    try:
        end = time.monotonic() + 15
        while True:                            # the channel reconnects with backoff
            try:
                assert c.Ping(payload=b"3", timeout=2).payload == b"3"
                break
            except RpcError:
                assert time.monotonic() < end
                time.sleep(0.2)
    finally:
        c.close()
        s2.stop(grace=0)


def _catch(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - returned for the assertion
        return exc


# --- a real server process, SIGSTOPped and SIGKILLed under concurrent callers ------------------

def _logtide():
    exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "logtide"]


def _free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def _serve(path, port):
    # the gRPC pipeline's tests: the server's gRPC port, clients with carrier="grpc"
    p = subprocess.Popen(_logtide() + ["logservice", "serve", "--dir", str(path), "--listen", "127.0.0.1:0",
                                       "--grpc-listen", f"127.0.0.1:{port}", "--stats-interval", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    assert " on " in line, line
    return p


def _hammer(client, threads: int, stop: threading.Event, acked: list, failures: list) -> list[threading.Thread]:
    def work(t):
        i = 0
        while not stop.is_set():
            try:
                acked.append((client.append(b"%d-%d" % (t, i), replica_id=t), t, i))
            except Exception as exc:  # noqa: BLE001 - checked by the test
                failures.append((time.monotonic(), exc))
                return
            i += 1
    ths = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for th in ths:
        th.start()
    return ths


def _latest_after_restart(client, timeout: float = 15.0) -> int:
    """The restarted server's latest LSN, once the client's next call reconnects."""
    end = time.monotonic() + timeout
    while True:
        try:
            return client.get_latest_lsn()
        except RpcError:
            assert time.monotonic() < end, "the client did not reconnect to the restarted server"
            time.sleep(0.2)


def test_sigstop_then_sigkill_of_the_server_ends_every_call(tmp_path):
    from logtide import connect_logservice
    port = _free_port()
    p = _serve(tmp_path / "log", port)
    client = connect_logservice(f"127.0.0.1:{port}", carrier="grpc", timeout=1.5)
    try:
        # stopped: every caller's deadline passes (DeadlineExceededError), nobody hangs
        stop, acked, failures = threading.Event(), [], []
        ths = _hammer(client, 8, stop, acked, failures)
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        for th in ths:
            th.join(10)
        assert not any(th.is_alive() for th in ths)
        assert len(failures) == 8 and all(isinstance(e, DeadlineExceededError) for _, e in failures)
        assert max(t for t, _ in failures) - t0 < 1.5 + 3.0
        assert acked

        # killed while calls are in flight on the stream: they fail with a typed error at once
        failures.clear()
        stop2 = threading.Event()
        client2 = connect_logservice(f"127.0.0.1:{port}", carrier="grpc", timeout=30, connect_timeout=0)
        ths = _hammer(client2, 8, stop2, acked, failures)
        time.sleep(0.3)                          # the calls queue on the stopped server
        t0 = time.monotonic()
        p.kill()
        p.wait()
        for th in ths:
            th.join(10)
        assert not any(th.is_alive() for th in ths)
        assert len(failures) == 8 and all(isinstance(e, RpcError) for _, e in failures)
        assert any(isinstance(e, RpcStreamBroken) for _, e in failures)
        assert max(t for t, _ in failures) - t0 < 5.0  # long before their 30 s deadline
        with pytest.raises(RpcError):
            client2.get_latest_lsn()

        # restarted on the same port and directory: the next call reconnects; nothing acknowledged is lost
        p = _serve(tmp_path / "log", port)
        latest = _latest_after_restart(client)
        assert latest >= len(acked) and latest >= max(lsn for lsn, _, _ in acked)
        recs, _ = client.read(1, 1 << 30)
        by_lsn = {r.lsn: r.payload for r in recs}
        assert all(by_lsn[lsn] == b"%d-%d" % (t, i) for lsn, t, i in acked)
        client2.close()
    finally:
        client.close()
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()


def test_sigkill_mid_batch_under_32_callers(tmp_path):
    """32 threads append through one client; the server is SIGKILLed while batches are in flight.
    Every caller ends at once with a typed error (no hang), and after a restart every acknowledged
    LSN holds exactly the payload of the caller that got it (each caller got its own reply)."""
    from logtide import connect_logservice
    port = _free_port()
    p = _serve(tmp_path / "log", port)
    client = connect_logservice(f"127.0.0.1:{port}", carrier="grpc", timeout=30)
    try:
        stop, acked, failures = threading.Event(), [], []
        ths = _hammer(client, 32, stop, acked, failures)
        end = time.monotonic() + 20
        while len(acked) < 3000 and time.monotonic() < end:   # well into the batching
            time.sleep(0.05)
        assert len(acked) >= 100
        t0 = time.monotonic()
        p.kill()
        p.wait()
        for th in ths:
            th.join(10)
        assert not any(th.is_alive() for th in ths)
        assert len(failures) == 32 and all(isinstance(e, RpcError) for _, e in failures)
        assert max(t for t, _ in failures) - t0 < 5.0            # long before the 30 s deadline
        assert client._rpc.transport.stream.inflight == 0

        p = _serve(tmp_path / "log", port)
        latest = _latest_after_restart(client)
        lsns = [lsn for lsn, _, _ in acked]
        assert len(set(lsns)) == len(lsns) and latest >= max(lsns)
        recs, _ = client.read(1, 1 << 30)
        by_lsn = {r.lsn: (r.payload, r.replica_id) for r in recs}
        assert all(by_lsn[lsn] == (b"%d-%d" % (t, i), t) for lsn, t, i in acked)
        # each thread's acknowledged appends are in its own order
        for t in range(32):
            mine = [(i, lsn) for lsn, tt, i in acked if tt == t]
            assert [lsn for _, lsn in sorted(mine)] == sorted(lsn for _, lsn in mine)
    finally:
        client.close()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_meta_client_under_a_stopped_server(tmp_path):
    from logtide import connect_meta
    from logtide.errors import MetaUnavailableError
    p = subprocess.Popen(_logtide() + ["meta", "serve", "--dir", str(tmp_path / "meta"), "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("meta-service listening on "), line
        with connect_meta(line.split()[-1], timeout=1.0) as c:
            c.upsert("k", b"v")
            os.kill(p.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            with pytest.raises(MetaUnavailableError):
                c.get("k")
            assert time.monotonic() - t0 < 4.0
            os.kill(p.pid, signal.SIGCONT)
            assert c.get("k").data == b"v"
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait()


def test_a_frozen_server_does_not_stall_the_other_clients_of_the_process(tmp_path):
    """Every call stream of the process runs on one event loop thread (engine/rpc/call_loop.py):
    callers of a SIGSTOPped server end with DeadlineExceededError while another client's callers,
    to a live server, go on being answered; thawed, the first server answers the same client again."""
    from logtide import connect_logservice
    pa, pb_ = _free_port(), _free_port()
    frozen, live = _serve(tmp_path / "a", pa), _serve(tmp_path / "b", pb_)
    ca = connect_logservice(f"127.0.0.1:{pa}", carrier="grpc", timeout=1.5)
    cb = connect_logservice(f"127.0.0.1:{pb_}", carrier="grpc", timeout=10)
    stop_a, stop_b = threading.Event(), threading.Event()
    acked_a, acked_b, fail_a, fail_b = [], [], [], []
    try:
        ths_a = _hammer(ca, 8, stop_a, acked_a, fail_a)
        ths_b = _hammer(cb, 8, stop_b, acked_b, fail_b)
        time.sleep(0.5)
        os.kill(frozen.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        n0 = len(acked_b)
        time.sleep(2.5)                           # A's callers wait out their 1.5 s deadline meanwhile
        during = len(acked_b) - n0
        for th in ths_a:
            th.join(10)
        assert not any(th.is_alive() for th in ths_a)
        assert len(fail_a) == 8 and all(isinstance(e, DeadlineExceededError) for _, e in fail_a)
        assert max(t for t, _ in fail_a) - t0 < 1.5 + 3.0
        assert not fail_b and during > 100, (during, fail_b[:1])
        stop_b.set()
        for th in ths_b:
            th.join(10)
        assert not fail_b
        os.kill(frozen.pid, signal.SIGCONT)
        end = time.monotonic() + 15
        while True:                               # the thawed server answers the same client again
            try:
                lsn = ca.append(b"after")
                break
            except RpcError:
                assert time.monotonic() < end
                time.sleep(0.1)
        assert acked_a and lsn > max(l for l, _, _ in acked_a)
        assert sorted(lsn for lsn, _, _ in acked_b) == list(range(1, len(acked_b) + 1))
    finally:
        stop_a.set()
        stop_b.set()
        ca.close()
        cb.close()
        for p in (frozen, live):
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
