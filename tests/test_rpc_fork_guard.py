"""gRPC after fork(): a child forked from a process that had used gRPC is refused at once with
ForkedProcessError (it used to hang until its deadline, or for ever while connecting), also when
the parent had closed its clients; the parent goes on unharmed; a child forked before the first use
of gRPC, or a spawned worker, uses gRPC normally."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from logtide import connect_logservice
from logtide.errors import ForkedProcessError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path):
    exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
    p = subprocess.Popen(([exe] if exe else [sys.executable, "-m", "logtide"]) + [
        "logservice", "serve", "--dir", str(tmp_path / "log"), "--listen", "127.0.0.1:0",
        "--grpc-listen", "127.0.0.1:0", "--stats-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(tmp_path), text=True)
    line = p.stdout.readline()
    assert "gRPC on 127.0.0.1:" in line, line
    yield line.split("gRPC on ")[1].split()[0]      # these tests are about gRPC: its port
    p.kill()
    p.wait()


def in_child(fn) -> dict:
    """Run fn() in a forked child (at most 30 s); its JSON result or its error's type and text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)   # a hang ends the child (and the parent sees no result) instead of the test
        os.close(r)
        try:
            t0 = time.monotonic()
            try:
                out = {"result": fn()}
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                out = {"error": type(exc).__name__, "message": str(exc)}
            out["seconds"] = time.monotonic() - t0
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert data, f"the child returned nothing (wait status {status}): it hung or crashed"
    return json.loads(data)


def test_a_child_forked_with_a_client_open_is_refused_at_once_and_the_parent_goes_on(server):
    client = connect_logservice(server, carrier="grpc")
    first = client.append(b"before the fork")
    stop = threading.Event()
    acked = []

    def load():           # calls in flight while the process forks
        while not stop.is_set():
            acked.append(client.append(b"x"))
    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.2)
        inherited = in_child(lambda: client.append(b"from the child"))
        fresh = in_child(lambda: connect_logservice(server, carrier="grpc").append(b"from a new client in the child"))
    finally:
        stop.set()
        for t in threads:
            t.join()
    for out in (inherited, fresh):
        assert out.get("error") == "ForkedProcessError", out
        assert "spawn" in out["message"] and f"process {os.getpid()}" in out["message"]
        assert out["seconds"] < 5
    # the parent's client is untouched: its calls go on, in order, and nothing came from the children
    last = client.append(b"after the forks")
    assert acked and last == first + len(acked) + 1
    records = [r.data[12:] for r in client.read(first, 1 << 20)[0]]
    assert b"from the child" not in records and b"from a new client in the child" not in records
    assert records[0] == b"before the fork" and records[-1] == b"after the forks"
    client.close()


CHILD = """
import json, os, sys, time
from logtide import connect_logservice
address, before = sys.argv[1], sys.argv[2]
if before == "used":            # the parent uses gRPC and closes everything before it forks
    c = connect_logservice(address, carrier="grpc")
    c.append(b"parent")
    c.close()
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(30)            # a hang ends here, as a wait status the parent reports
    t0 = time.monotonic()
    try:
        with connect_logservice(address, carrier="grpc") as child:
            out = {"result": child.append(b"child")}
    except Exception as exc:
        out = {"error": type(exc).__name__}
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
if before == "unused":          # the parent may use gRPC after the fork
    with connect_logservice(address, carrier="grpc") as c:
        c.append(b"parent")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_child(server, tmp_path, before):
    # in a fresh interpreter (outside the source tree): this test process has used gRPC already
    p = subprocess.run([sys.executable, "-c", CHILD, server, before], capture_output=True, text=True,
                       timeout=60, cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout, (p.returncode, p.stderr[-2000:])
    return json.loads(p.stdout)


def test_a_child_forked_after_the_parent_closed_its_clients_is_still_refused(server, tmp_path):
    out = run_child(server, tmp_path, "used")
    assert out.get("error") == "ForkedProcessError" and out["seconds"] < 5, out
    with connect_logservice(server, carrier="grpc") as c:
        assert [r.data[12:] for r in c.read(1, 1 << 20)[0]] == [b"parent"]


def test_a_child_forked_before_the_first_use_of_grpc_uses_it(server, tmp_path):
    out = run_child(server, tmp_path, "unused")
    assert out.get("result") == 1, out
    with connect_logservice(server, carrier="grpc") as c:
        assert sorted(r.data[12:] for r in c.read(1, 1 << 20)[0]) == [b"child", b"parent"]


SPAWNED = """
from logtide import connect_logservice
with connect_logservice(address, carrier="grpc") as c:
    q.put(c.append(b"spawned"))
"""


def test_a_spawned_worker_uses_grpc_while_the_parent_has_clients_open(server):
    client = connect_logservice(server, carrier="grpc")
    client.append(b"parent")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=exec, args=(SPAWNED, {"address": server, "q": q}))
    p.start()
    assert q.get(timeout=60) == 2
    p.join(30)
    assert p.exitcode == 0
    assert client.append(b"parent again") == 3
    client.close()


def test_the_refusal_is_its_own_type():
    # not an RpcError: the clients' retry loops (replicated log, meta) must not retry it to their deadline
    from logtide.errors import LogtideError, RpcError
    assert issubclass(ForkedProcessError, LogtideError) and not issubclass(ForkedProcessError, RpcError)
