"""Three `logtide logservice serve --raft` replicas on loopback for the benchmarks (default
timeouts, fsync on), and free ports for them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from logtide.engine.cluster.loopback_ports import free_ports  # noqa: F401 - tests/ports.py re-exports it

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")


class RaftCluster:
    """Replicas 1..3 under `root`; `addresses` is the client's "h1:p1,h2:p2,h3:p3"."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = dict(zip((1, 2, 3), free_ports(3)))
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in self.ports.items())
        self.procs: dict[int, subprocess.Popen] = {}
        for i in self.ports:
            self.start(i)
        self.addresses = ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def start(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "logservice", "serve", "--raft", "--id", str(i), "--peers", self.peers,
             "--dir", str(self.root / f"r{i}"), "--stats-interval", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.root)

    def status(self, i: int) -> dict:
        from logtide.engine.logservice import replicated_pb2 as pb
        from logtide.engine.logservice.replicated import REPLICATED_SERVICE
        from logtide.engine.nodehost.channel import connect_replica
        c = connect_replica(REPLICATED_SERVICE, f"127.0.0.1:{self.ports[i]}", timeout=0.5)
        try:
            return json.loads(c.invoke("Status", pb.REmpty()).json)
        finally:
            c.close()

    def leader(self, deadline: float = 30.0) -> int:
        from logtide.errors import LogtideError
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for i in list(self.procs):
                try:
                    if self.status(i).get("role") == "leader":
                        return i
                except LogtideError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("no Raft leader")

    def healthy(self, deadline: float = 30.0) -> int:
        """Wait until every replica runs, follows one leader and applied what that leader had
        committed (a replica restarted a moment ago may still be starting); returns the leader."""
        from logtide.errors import LogtideError
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                sts = {i: self.status(i) for i in self.procs}
                leads = {s["lead"] for s in sts.values()}
                if len(leads) == 1 and 0 not in leads:
                    lead = leads.pop()
                    if sts.get(lead, {}).get("role") == "leader" and \
                            all(s["applied"] >= sts[lead]["commit"] for s in sts.values()):
                        return lead
            except LogtideError:
                pass
            time.sleep(0.02)
        raise RuntimeError("the Raft group did not become healthy")

    def stop(self) -> None:
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
