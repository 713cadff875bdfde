"""Importing logtide first makes fork-then-exec safe while gRPC is busy in the process: PySpark
launches its Java gateway with Popen(preexec_fn=...), a plain fork, and gRPC's fork handlers made
such children abort (SIGABRT) now and then, so a driver with a live channel could not start Spark."""
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "logtide-first":
        import logtide
    import grpc, subprocess, threading
    from concurrent import futures
    srv = grpc.server(futures.ThreadPoolExecutor(4))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stop = threading.Event()
    def busy():
        call = ch.unary_unary("/logtide.NoSuch/Call")
        while not stop.is_set():
            try:
                call(b"x", timeout=0.5)
            except grpc.RpcError:
                pass
    threads = [threading.Thread(target=busy) for _ in range(4)]
    for t in threads:
        t.start()
    codes = [subprocess.Popen(["/bin/true"], stdin=subprocess.PIPE, preexec_fn=lambda: None).wait()
             for _ in range(int(sys.argv[2]))]
    stop.set()
    for t in threads:
        t.join()
    print(sum(1 for c in codes if c != 0), file=sys.stdout)
""")


def _failed_children(mode: str, forks: int) -> int:
    env = {k: v for k, v in __import__("os").environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(forks)], capture_output=True,
                         text=True, timeout=120, env=env, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(150)
def test_children_forked_beside_busy_grpc_exec_cleanly():
    assert _failed_children("logtide-first", 200) == 0
