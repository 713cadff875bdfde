"""Crash test: the meta-service server is killed with SIGKILL at random points while clients write.

Every acknowledged write must be there after the restart, and the seq never goes back.
"""
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from logtide import connect_meta
from logtide.engine.meta import op
from logtide.errors import LogtideError

pytestmark = pytest.mark.timeout(240)
ROUNDS = 20
WRITERS = 4


def _start(d):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.Popen([sys.executable, "-m", "logtide", "meta", "serve", "--dir", str(d),
                          "--listen", "127.0.0.1:0", "--snapshot-every", "40"],
                         stdout=subprocess.PIPE, text=True, cwd="/", env=env)
    line = p.stdout.readline()
    assert line.startswith("meta-service listening on "), line
    return p, line.split()[-1]


def test_sigkill_while_clients_write(tmp_path):
    rng = random.Random(7)
    d = tmp_path / "meta"
    acked = {}               # key -> seq the server acknowledged
    acked_incr = 0           # acknowledged fetch-adds of "counter"
    tried_incr = 0
    max_seq = 0
    for rnd in range(ROUNDS):
        p, addr = _start(d)
        try:
            with connect_meta(addr, timeout=5) as c:
                # everything acknowledged so far survived, and seq did not go back
                seq_now = c.seq
                assert seq_now >= max_seq, f"round {rnd}: seq went back {max_seq} -> {seq_now}"
                keys = sorted(acked)
                for i in range(0, len(keys), 200):
                    got = c.mget(keys[i:i + 200])
                    for k, v in zip(keys[i:i + 200], got):
                        assert v is not None and v.seq == acked[k], f"round {rnd}: lost {k}"
                cnt = c.get("counter")
                n = int(cnt.data) if cnt else 0
                assert acked_incr <= n <= tried_incr
                acked_incr = tried_incr = n
                max_seq = seq_now
            stop = threading.Event()
            lock = threading.Lock()
            counts = {"incr": 0, "tried": 0}

            def writer(w):
                with connect_meta(addr, timeout=5) as cw:
                    j = 0
                    while not stop.is_set():
                        key = f"r{rnd}/w{w}/{j}"
                        j += 1
                        try:
                            if j % 4 == 0:
                                with lock:
                                    counts["tried"] += 1
                                cw.txn(if_then=[op.fetch_add_u64("counter", 1)])
                                with lock:
                                    counts["incr"] += 1
                            else:
                                _, r = cw.upsert(key, b"v" * 32)
                                with lock:
                                    acked[key] = r.seq
                        except LogtideError:
                            return           # the server died mid-call: not acknowledged
            ts = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
            for t in ts:
                t.start()
            time.sleep(rng.uniform(0.1, 0.5))
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            stop.set()
            for t in ts:
                t.join(15)
            acked_incr += counts["incr"]
            tried_incr += counts["tried"]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    print(f"{ROUNDS} kills: {len(acked)} acknowledged upserts, {acked_incr} acknowledged fetch-adds, seq {max_seq}")
    assert len(acked) > ROUNDS * 10      # the writers really wrote between the kills
    p, addr = _start(d)
    try:
        with connect_meta(addr) as c:
            assert c.seq >= max_seq
            assert all(v is not None for v in c.mget(sorted(acked)[:500]))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
