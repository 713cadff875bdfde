"""`logtide replay primary|ro` as separate processes: start one and wait for its port, connect a
client to it, and kill it."""
import signal
import subprocess
import sys
import time
from pathlib import Path


def start_replay(tmp: Path, *args: str, name: str) -> tuple[subprocess.Popen, str]:
    """Start `logtide replay ARGS` in tmp; its output goes to tmp/NAME.log. Returns (process, addr)."""
    port_file = tmp / f"{name}.port"
    if port_file.exists():
        port_file.unlink()
    out = open(tmp / f"{name}.log", "ab")
    p = subprocess.Popen([sys.executable, "-m", "logtide", "replay", *args, "--port-file", str(port_file)],
                         cwd=tmp, stdout=out, stderr=subprocess.STDOUT)
    end = time.monotonic() + 60
    while not port_file.exists():
        if p.poll() is not None or time.monotonic() > end:
            p.kill()
            raise AssertionError(f"{name} did not start:\n" + (tmp / f"{name}.log").read_text()[-3000:])
        time.sleep(0.05)
    return p, f"127.0.0.1:{port_file.read_text()}"


def replay_client(addr: str, timeout: float = 30):
    from logtide.engine.rpc import connect
    from logtide.replay.replication_rpc import REPLAY_NODE
    return connect(REPLAY_NODE, addr, timeout=timeout)


def kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait(10)
