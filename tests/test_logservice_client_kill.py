"""Client processes SIGKILLed with appends in flight on a `logtide logservice serve` process.

The server queues one-payload appends on its group committer and answers them from its durability
watcher (defer_frames_Append). A client that dies with appends queued leaves answers that go to a
closed connection. The server must keep serving its other clients, lose none of the appends it
acknowledged to the dead ones, and reopen (after its own SIGKILL) with all of them."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from logtide_cli import logtide_cmd  # noqa: E402
from test_logservice_kill import verify  # noqa: E402

from logtide import connect_logservice
from child_output import rest_of_output  # noqa: E402

pytestmark = pytest.mark.timeout(240)

ROUNDS = 6
THREADS = 8

CLIENT = textwrap.dedent("""
    import sys, threading
    from logtide import connect_logservice
    address, tag, nthreads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = connect_logservice(address)
    out_lock = threading.Lock()
    def work(t):
        i = 0
        while True:
            lsn = client.append(b"c%d-t%d-i%d" % (tag, t, i), replica_id=t)
            with out_lock:  # acknowledged: the server answers once the record is durable
                sys.stdout.write("%d %d %d\\n" % (lsn, t, i))
                sys.stdout.flush()
            i += 1
    print("ready", flush=True)
    for t in range(nthreads):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def _serve(path: str, cwd: str) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(logtide_cmd() + ["logservice", "serve", "--dir", path, "--listen", "127.0.0.1:0",
                                       "--segment-size", str(64 << 10), "--stats-interval", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, text=True)
    line = p.stdout.readline()
    assert " on 127.0.0.1:" in line, line
    return p, line.split(" on ")[1].split()[0]


def test_clients_killed_mid_append_leave_the_server_serving_and_their_acks_durable(tmp_path):
    rng = random.Random(27)
    path = str(tmp_path / "log")
    acked: dict[int, tuple[int, bytes]] = {}
    server, address = _serve(path, str(tmp_path))
    survivor = connect_logservice(address, timeout=10)
    try:
        for rnd in range(ROUNDS):
            clients = [subprocess.Popen([sys.executable, "-c", CLIENT, address, str(rnd * 10 + c), str(THREADS)],
                                        stdout=subprocess.PIPE, cwd=str(tmp_path), text=True) for c in range(2)]
            try:
                for c in clients:
                    assert c.stdout.readline().strip() == "ready"
                time.sleep(rng.uniform(0.1, 0.6))
            finally:
                for c in clients:
                    os.kill(c.pid, signal.SIGKILL)
            for n, c in enumerate(clients):
                out = rest_of_output(c)
                for line in out.split("\n")[:-1]:      # the last line may be torn by the kill
                    lsn, t, i = map(int, line.split())
                    assert lsn not in acked, f"LSN {lsn} acknowledged twice"
                    acked[lsn] = (t, b"c%d-t%d-i%d" % (rnd * 10 + n, t, i))
            # the server lives on and serves the client that stayed, at the next LSN
            assert server.poll() is None
            lsn = survivor.append(b"survivor %d" % rnd, replica_id=99)
            assert lsn == survivor.get_latest_lsn()
            assert lsn > max(acked, default=0)
            acked[lsn] = (99, b"survivor %d" % rnd)
            recs, _ = survivor.read(lsn, 1 << 16)
            assert (recs[0].replica_id, recs[0].payload) == acked[lsn]
    finally:
        survivor.close()
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    assert len(acked) > ROUNDS * 10      # the clients did append
    verify(path, acked, ROUNDS)
