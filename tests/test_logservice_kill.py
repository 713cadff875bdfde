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
import time

import pytest

from logtide import LogService

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


def test_sigkill_loses_no_acknowledged_record(tmp_path):
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
            out, _ = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL
        lines = out.split("\n")[:-1]  # the last line may be torn by the kill
        for line in lines:
            lsn, t, i = map(int, line.split())
            assert lsn not in acked, f"LSN {lsn} acknowledged twice"
            acked[lsn] = (t, payload(rnd, t, i))

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
            # the tail is clean: the last segment ends exactly at the last good record
            last = svc._segments[-1]
            assert os.path.getsize(last.path) == last.size
        if rnd % 6 == 5:
            # and it accepts appends after recovery with the next LSN
            with LogService.open(path, segment_size=64 << 10) as svc:
                lsn = svc.append(b"between rounds")
                assert lsn == latest + 1
                acked[lsn] = (0, b"between rounds")
    assert len(acked) > ROUNDS * 10
