"""Crash test: the log service runs in its own process, several threads append, and the process is
SIGKILLed at random times. After every kill, the reopened log must hold every acknowledged record
byte for byte, with no LSN gap and a clean tail."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from logtide import LogService
from child_output import rest_of_output
from logtide_cli import logtide_cmd

pytestmark = pytest.mark.timeout(240)

ROUNDS = 24
THREADS = 6

CHILD = textwrap.dedent("""
    import sys, threading
    from logtide import LogService
    path, rnd, nthreads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    svc = LogService.open(path, segment_size=64 << 10)  # small segments: kills also land on rolls
    out_lock = threading.Lock()
    def payload(t, i):
        return (b"r%d-t%d-i%d|" % (rnd, t, i)) * (1 + (i * 7 + t) % 40)
    def work(t):
        i = 0
        while True:
            if i % 5 == 4:
                ps = [payload(t, i + k) for k in range(3)]
                first = svc.append_many(ps, replica_id=t)
                acked = [(first + k, i + k) for k in range(3)]
                i += 3
            else:
                acked = [(svc.append(payload(t, i), replica_id=t), i)]
                i += 1
            with out_lock:  # acknowledged: append returned, so the record is durable
                sys.stdout.write("".join("%d %d %d\\n" % (lsn, t, j) for lsn, j in acked))
                sys.stdout.flush()
    print("ready", flush=True)
    for t in range(nthreads):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def payload(rnd, t, i):
    return (b"r%d-t%d-i%d|" % (rnd, t, i)) * (1 + (i * 7 + t) % 40)


def verify(path: str, acked: dict, rnd: int) -> int:
    """Reopen: every acknowledged record byte-identical, no LSN gap, a clean tail. Returns latest LSN."""
    with LogService.open(path, segment_size=64 << 10) as svc:
        latest = svc.get_latest_lsn()
        assert latest >= max(acked, default=0)
        lsn, seen = 1, 0
        while lsn <= latest:
            recs, nxt = svc.read(lsn, 1 << 20)
            assert [r.lsn for r in recs] == list(range(lsn, nxt))  # no gap
            for r in recs:
                if r.lsn in acked:
                    assert (r.replica_id, r.payload) == acked[r.lsn], f"round {rnd}: LSN {r.lsn} differs"
                    seen += 1
            lsn = nxt
        assert seen == len(acked)
        # the tail is clean: after the last good record the last segment holds only pre-allocated zeros
        last = svc._segments[-1]
        with open(last.path, "rb") as f:
            rest = f.read()[last.size:]
        assert rest == bytes(len(rest))
    with LogService.open(path, segment_size=64 << 10) as svc:  # a second open finds nothing to cut
        assert svc.get_latest_lsn() == latest
    return latest


def test_sigkill_loses_no_acknowledged_record(tmp_path):
    """Appending threads inside the killed process; acknowledgements go out on its stdout."""
    rng = random.Random(20261121)
    path = str(tmp_path / "log")
    acked: dict[int, tuple[int, bytes]] = {}  # lsn -> (replica id, payload)
    for rnd in range(ROUNDS):
        p = subprocess.Popen([sys.executable, "-c", CHILD, path, str(rnd), str(THREADS)], stdout=subprocess.PIPE,
                             cwd=str(tmp_path), text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.02, 0.5))
        finally:
            os.kill(p.pid, signal.SIGKILL)
            out = rest_of_output(p)
        assert p.returncode == -signal.SIGKILL
        lines = out.split("\n")[:-1]  # the last line may be torn by the kill
        for line in lines:
            lsn, t, i = map(int, line.split())
            assert lsn not in acked, f"LSN {lsn} acknowledged twice"
            acked[lsn] = (t, payload(rnd, t, i))
        latest = verify(path, acked, rnd)
        if rnd % 6 == 5:
            # and it accepts appends after recovery with the next LSN
            with LogService.open(path, segment_size=64 << 10) as svc:
                lsn = svc.append(b"between rounds")
                assert lsn == latest + 1
                acked[lsn] = (0, b"between rounds")
    assert len(acked) > ROUNDS * 2  # the rounds did append


GRPC_ROUNDS = 20


def test_sigkill_of_the_grpc_server(tmp_path):
    """`logtide logservice serve` in its own process; client threads here append over gRPC and record
    every acknowledged LSN; the server is SIGKILLed at random times."""
    from logtide import connect_logservice
    from logtide.errors import LogtideError
    rng = random.Random(4)
    path = str(tmp_path / "log")
    acked: dict[int, tuple[int, bytes]] = {}
    for rnd in range(GRPC_ROUNDS):
        p = subprocess.Popen(logtide_cmd() + ["logservice", "serve", "--dir", path, "--listen", "127.0.0.1:0",
                                           "--segment-size", str(64 << 10), "--stats-interval", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(tmp_path), text=True)
        lock = threading.Lock()
        threads = []
        try:
            line = p.stdout.readline()
            assert " on 127.0.0.1:" in line, line
            address = line.split(" on ")[1].split()[0]
            client = connect_logservice(address)

            def work(t):
                i = 0
                try:
                    while True:
                        data = payload(rnd, t, i)
                        if i % 4 == 3:
                            first = client.append_many([data, data[::-1]], replica_id=t)
                            with lock:
                                acked[first] = (t, data)
                                acked[first + 1] = (t, data[::-1])
                        else:
                            lsn = client.append(data, replica_id=t)
                            with lock:
                                assert lsn not in acked
                                acked[lsn] = (t, data)
                        i += 1
                except LogtideError:  # the server died under us: unacknowledged, nothing recorded
                    return

            threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
            for th in threads:
                th.start()
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
            for th in threads:
                th.join(timeout=30)
        assert not any(th.is_alive() for th in threads)
        client.close()
        verify(path, acked, rnd)
    assert len(acked) > GRPC_ROUNDS
