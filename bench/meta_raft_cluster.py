"""Three `logtide meta serve --raft` replicas on loopback (fsync on, default ticks), for benchmarks."""
from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.raft_cluster import LOGTIDE, free_ports


class MetaRaftCluster:
    """Replicas 1..3; `addresses` is connect_meta's "h1:p1,h2:p2,h3:p3". None of it is timed."""

    def __init__(self, replicas: int = 3) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="bench-meta-raft-"))
        ports = dict(zip(range(1, replicas + 1), free_ports(replicas)))
        peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in ports.items())
        self.procs = [subprocess.Popen([LOGTIDE, "meta", "serve", "--raft", "--id", str(i), "--peers", peers,
                                        "--dir", str(self.root / f"m{i}")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.root)
                      for i in ports]
        self.addresses = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        self._wait_leader()

    def _wait_leader(self, timeout: float = 60.0) -> None:
        from logtide.engine.meta.client import connect_meta
        from logtide.errors import LogtideError
        end = time.monotonic() + timeout
        while True:
            try:
                with connect_meta(self.addresses, timeout=2.0) as c:
                    c.upsert("bench/probe", b"x")
                    return
            except LogtideError:
                if time.monotonic() > end:
                    self.stop()
                    raise RuntimeError("the meta-service group did not elect a leader") from None
                time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.root, ignore_errors=True)
