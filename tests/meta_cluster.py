"""A meta-service Raft group of separate `logtide meta serve --raft` processes on loopback."""
import os
import signal
import subprocess
import sys
import time

from logtide.errors import LogtideError

from ports import free_ports

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
TICK = "0.05"  # 0.3-0.6 s elections keep fault rounds short (the default tick is 0.1 s)


class MetaCluster:
    def __init__(self, tmp_path, n=3, clock_file=None, extra=()):
        self.tmp = tmp_path
        self.clock_file = clock_file
        self.extra = list(extra)
        self.ports = dict(zip(range(1, n + 1), free_ports(n)))
        self.procs = {}
        for i in self.ports:
            self.start(i)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def addrs(self):
        return ",".join(self.addr(i) for i in self.ports)

    def peers(self):
        return ",".join(f"{j}={self.addr(j)}" for j in self.ports)

    def start(self, i):
        log = open(self.tmp / f"meta{i}.log", "ab")
        clock = ["--clock-file", str(self.clock_file)] if self.clock_file else []
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "meta", "serve", "--raft", "--id", str(i), "--peers", self.peers(),
             "--dir", str(self.tmp / f"m{i}"), "--tick", TICK, *clock, *self.extra],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def kill(self, i, sig=signal.SIGKILL):
        p = self.procs.pop(i)
        p.send_signal(sig)
        p.wait(timeout=30)

    def status(self, i, timeout=1.0):
        """Replica i's own view (a stale Status): role, term, leader_id, commit_index, applied_index, seq..."""
        from logtide.engine.meta import meta_pb2 as pb
        from logtide.engine.meta.server import META
        from logtide.engine.rpc import connect
        c = connect(META, self.addr(i), timeout=timeout, connect_timeout=timeout)
        try:
            return c.invoke("Status", pb.StatusRequest(consistency="stale"))
        finally:
            c.close()

    def leader(self, deadline=30.0):
        """The id of a replica that says it leads (and answers)."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for i in list(self.procs):
                try:
                    if self.status(i).role == "leader":
                        return i
                except LogtideError:
                    pass
            time.sleep(0.05)
        raise AssertionError("no leader within the deadline\n" + self.logs_tail())

    def wait_applied(self, index, ids=None, timeout=30.0):
        """Until every replica in `ids` (default: all running) applied up to `index`."""
        end = time.monotonic() + timeout
        for i in ids or list(self.procs):
            while True:
                try:
                    if self.status(i).applied_index >= index:
                        break
                except LogtideError:
                    pass
                assert time.monotonic() < end, f"replica {i} did not apply up to {index}"
                time.sleep(0.05)

    def logs_tail(self, n=1500):
        out = []
        for i in self.ports:
            p = self.tmp / f"meta{i}.log"
            if p.exists():
                out.append(f"--- meta{i}.log\n" + p.read_text(errors="replace")[-n:])
        return "\n".join(out)

    def stop(self, sig=signal.SIGTERM):
        """Stop every replica (SIGTERM: a clean close; SIGKILL: a group thrown away)."""
        for p in self.procs.values():
            p.send_signal(sig)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs.clear()


def wait_ready(cluster, timeout=30.0):
    """Until a leader serves a linearizable read through every replica (each knows the leader)."""
    from logtide import connect_meta
    cluster.leader(timeout)
    end = time.monotonic() + timeout
    for i in cluster.ports:
        while True:
            try:
                with connect_meta(cluster.addr(i), timeout=5, follow_leader=False) as c:
                    c.get("ready-probe")
                break
            except LogtideError:
                assert time.monotonic() < end, f"replica {i} did not serve\n" + cluster.logs_tail()
                time.sleep(0.05)
