"""SIGKILL a primary process under 16 concurrent backends (group commit): every acknowledged write
survives the restart, and no write is half done. Every eighth write is an update that grows its
tuple, so it may move to another page (one record, two pages): after recovery either both pages
show it or neither does."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from logtide.replay.primary import Primary

BACKENDS = 16
REL = 16384
CHILD = textwrap.dedent("""
    import sys, threading
    from logtide.replay.primary import Primary
    p = Primary.open(sys.argv[1], checkpoint_interval=0.05)
    out = threading.Lock()

    def backend(k):
        i = 0
        while True:
            data = f"{k}:{i}:".encode() * 8
            tid = p.insert(16384, data)
            line = f"I {k} {i} {tid[0]} {tid[1]}"
            if i % 8 == 7:
                with out:
                    sys.stdout.write(line + "\\n")
                    sys.stdout.flush()
                new = p.update(16384, tid, data * 40)
                line = f"U {k} {i} {new[0]} {new[1]}"
            with out:
                sys.stdout.write(line + "\\n")   # only after the write is acknowledged
                sys.stdout.flush()
            i += 1

    for k in range({backends}):
        threading.Thread(target=backend, args=(k,), daemon=True).start()
    threading.Event().wait()
""").replace("{backends}", str(BACKENDS))


def data_of(k, i, updated):
    d = f"{k}:{i}:".encode() * 8
    return d * 40 if updated else d


@pytest.mark.timeout(240)
def test_sigkill_under_sixteen_backends(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines = []
    try:
        for line in p.stdout:
            lines.append(line.split())
            if len(lines) >= 1500:
                break
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    lines += [line.split() for line in p.stdout.read().splitlines() if line.strip()]
    assert p.returncode == -signal.SIGKILL, p.stderr.read()[-3000:]
    primary = Primary.open(tmp_path, checkpoint_interval=0)
    try:
        live = dict(primary.scan(REL))
    finally:
        primary.close()
    where = {}     # (k, i) -> (tid, updated) as last acknowledged
    for kind, k, i, b, s in lines:
        where[(int(k), int(i))] = ((int(b), int(s)), kind == "U")
    # every acknowledged write is there, as acknowledged (an insert's update may have followed it
    # unacknowledged: then the tuple is at its old place or at a new one, never at both or neither)
    for (k, i), (tid, updated) in where.items():
        if updated or i % 8 != 7:
            assert live.get(tid) == data_of(k, i, updated), (k, i, tid)
        else:
            mine = [t for t, d in live.items() if d in (data_of(k, i, False), data_of(k, i, True))]
            assert len(mine) == 1, (k, i, mine)
            assert mine == [tid] or live[mine[0]] == data_of(k, i, True), (k, i, mine)
    # nothing else but each backend's one write in flight at the kill
    seen = {}
    for t, d in live.items():
        k, i = (int(x) for x in d.split(b":")[:2])
        assert d in (data_of(k, i, False), data_of(k, i, True))
        seen[(k, i)] = seen.get((k, i), 0) + 1
    assert all(n == 1 for n in seen.values())
    for k in range(BACKENDS):
        acked = [i for kk, i in where if kk == k]
        mine = sorted(i for kk, i in seen if kk == k)
        top = max(acked, default=-1)
        assert mine == list(range(len(mine))) and len(mine) in (top + 1, top + 2), (k, mine[-3:], top)
