"""Both carriers of logtide's own clients (the framed carrier, the default, and gRPC, the interop
carrier) against a real server process that is SIGSTOPped, SIGKILLed and restarted under
concurrent callers: every call ends by its deadline or at once with a typed error, never a hang;
after a restart nothing acknowledged is lost and each caller got its own reply; a frozen server
does not stall the process's other clients."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from frozen import freeze
from logtide_cli import logtide_cmd
from ports import free_ports

from logtide.errors import DeadlineExceededError, RpcError, RpcStreamBroken

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("carrier", ["wire", "grpc"])]


# --- a real server process, SIGSTOPped and SIGKILLed under concurrent callers ------------------


def _serve(path, port, carrier):
    """The log service on `port`: its framed carrier there, or its gRPC port there."""
    where = (["--listen", f"127.0.0.1:{port}"] if carrier == "wire" else
             ["--listen", "127.0.0.1:0", "--grpc-listen", f"127.0.0.1:{port}"])
    p = subprocess.Popen(logtide_cmd() + ["logservice", "serve", "--dir", str(path), *where, "--stats-interval", "0"],
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


def test_sigstop_then_sigkill_of_the_server_ends_every_call(tmp_path, carrier):
    from logtide import connect_logservice
    port, = free_ports(1)
    p = _serve(tmp_path / "log", port, carrier)
    client = connect_logservice(f"127.0.0.1:{port}", carrier=carrier, timeout=1.5)
    try:
        # stopped: every caller's deadline passes (DeadlineExceededError), nobody hangs
        stop, acked, failures = threading.Event(), [], []
        ths = _hammer(client, 8, stop, acked, failures)
        time.sleep(0.5)
        freeze(p.pid)
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
        client2 = connect_logservice(f"127.0.0.1:{port}", carrier=carrier, timeout=30, connect_timeout=0)
        ths = _hammer(client2, 8, stop2, acked, failures)
        time.sleep(0.3)                          # the calls queue on the stopped server
        t0 = time.monotonic()
        p.kill()
        p.wait()
        for th in ths:
            th.join(10)
        assert not any(th.is_alive() for th in ths)
        assert len(failures) == 8 and all(isinstance(e, RpcError) for _, e in failures)
        if carrier == "wire":                    # the framed client names the broken connection
            assert any(isinstance(e, RpcStreamBroken) for _, e in failures)
        assert max(t for t, _ in failures) - t0 < 5.0  # long before their 30 s deadline
        with pytest.raises(RpcError):
            client2.get_latest_lsn()

        # restarted on the same port and directory: the next call reconnects; nothing acknowledged is lost
        p = _serve(tmp_path / "log", port, carrier)
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


def test_sigkill_mid_batch_under_32_callers(tmp_path, carrier):
    """32 threads append through one client; the server is SIGKILLed while batches are in flight.
    Every caller ends at once with a typed error (no hang), and after a restart every acknowledged
    LSN holds exactly the payload of the caller that got it (each caller got its own reply)."""
    from logtide import connect_logservice
    port, = free_ports(1)
    p = _serve(tmp_path / "log", port, carrier)
    client = connect_logservice(f"127.0.0.1:{port}", carrier=carrier, timeout=30)
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
        if carrier == "wire":
            assert client._rpc.transport.connection.slots.inflight == 0

        p = _serve(tmp_path / "log", port, carrier)
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


def test_meta_client_under_a_stopped_server(tmp_path, carrier):
    from logtide import connect_meta
    from logtide.errors import MetaUnavailableError
    p = subprocess.Popen(logtide_cmd() + ["meta", "serve", "--dir", str(tmp_path / "meta"), "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("meta-service listening on "), line
        with connect_meta(line.split()[-1], timeout=1.0, carrier=carrier) as c:
            c.upsert("k", b"v")
            freeze(p.pid)      # every thread stopped: SIGSTOP takes effect per thread, not at os.kill's return
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


def test_a_frozen_server_does_not_stall_the_other_clients_of_the_process(tmp_path, carrier):
    """Every framed-carrier connection of the process runs on one event loop thread (WireLoop):
    callers of a SIGSTOPped server end with DeadlineExceededError while another client's callers,
    to a live server, go on being answered; thawed, the first server answers the same client again."""
    from logtide import connect_logservice
    pa, pb_ = free_ports(2)
    frozen, live = _serve(tmp_path / "a", pa, carrier), _serve(tmp_path / "b", pb_, carrier)
    ca = connect_logservice(f"127.0.0.1:{pa}", carrier=carrier, timeout=1.5)
    cb = connect_logservice(f"127.0.0.1:{pb_}", carrier=carrier, timeout=10)
    stop_a, stop_b = threading.Event(), threading.Event()
    acked_a, acked_b, fail_a, fail_b = [], [], [], []
    try:
        ths_a = _hammer(ca, 8, stop_a, acked_a, fail_a)
        ths_b = _hammer(cb, 8, stop_b, acked_b, fail_b)
        time.sleep(0.5)
        freeze(frozen.pid)
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
