"""A HAKeeper group of separate `logtide hakeeper serve` processes on loopback, for tests."""
import os
import signal
import subprocess
import sys
import time

from ports import free_ports

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.errors import LogtideError

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
# the world's timeouts (tests/hakeeper_world.py): seconds, as HAKeeper's leader judges stores
TIMEOUTS = "log=3,tn=2,cn=2,ro=2,primary=2,command=3"


class HAKeeperProcs:
    def __init__(self, tmp_path, n=3, extra=()):
        self.tmp, self.extra = tmp_path, list(extra)
        self.ports = dict(zip(range(1, n + 1), free_ports(n)))
        self.procs = {}
        for i in self.ports:
            self.start(i)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def addrs(self):
        return ",".join(self.addr(i) for i in self.ports)

    def start(self, i):
        log = open(self.tmp / f"hakeeper{i}.log", "ab")
        peers = ",".join(f"{j}={self.addr(j)}" for j in self.ports)
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "hakeeper", "serve", "--id", str(i), "--peers", peers, "--dir", str(self.tmp / f"hk{i}"),
             "--hakeeper-tick", "0.05", "--hakeeper-check-interval", "0.5", "--hakeeper-timeouts", TIMEOUTS,
             *self.extra], stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def kill(self, i, sig=signal.SIGKILL):
        self.procs[i].send_signal(sig)
        if sig == signal.SIGKILL:
            self.procs[i].wait(10)
            del self.procs[i]

    def client(self, **kw):
        return HAKeeperClient(self.addrs(), **kw)

    def leader(self, timeout=20.0, exclude=()):
        """(replica id, status) of a leader that ticks, once one is found."""
        end = time.monotonic() + timeout
        with self.client(timeout=2.0) as c:
            while time.monotonic() < end:
                try:
                    st = c.status()
                    if st["role"] == "leader" and st["replica"] not in exclude:
                        return st["replica"], st
                except LogtideError:
                    pass
                time.sleep(0.05)
        raise AssertionError(f"no HAKeeper leader within {timeout} s\n{self.logs_tail()}")

    def logs_tail(self, n=1500):
        return "\n".join(f"--- hakeeper{i}.log\n" + (self.tmp / f"hakeeper{i}.log").read_text(errors="replace")[-n:]
                         for i in self.ports if (self.tmp / f"hakeeper{i}.log").exists())

    def stop(self):
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs.clear()
