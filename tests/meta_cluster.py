"""A meta-service Raft group of separate `logtide meta serve --raft` processes on loopback.

With proxied=True every replica reaches every other one through its own loopback TCP proxy (one
per direction of each pair: replica i's --peers names j at proxy (i, j), which forwards to j's
port), so a test cuts links between replicas (cut, isolate, heal) at the byte level, whatever
carrier the replicas speak. Clients use the replicas' own ports (addr), outside the proxies.
"""
import os
import signal
import subprocess
import sys
import time

from logtide.errors import LogtideError

from ports import free_ports
from frozen import freeze

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
BIND_ATTEMPTS = 3  # free_ports cannot hold a port until the replica binds it
TICK = "0.05"  # 0.3-0.6 s elections keep fault rounds short (the default tick is 0.1 s)


class MetaCluster:
    def __init__(self, tmp_path, n=3, clock_file=None, extra=(), proxied=False):
        self.tmp = tmp_path
        self.clock_file = clock_file
        self.extra = list(extra)
        self.procs = {}
        self.joined = set()     # replicas started with --join (added later as learners)
        self.links = {}         # (i, j) -> the TcpProxy replica i reaches replica j through
        for attempt in range(BIND_ATTEMPTS):
            self.ports = dict(zip(range(1, n + 1), free_ports(n)))
            if proxied:
                from tcp_proxy import TcpProxy
                for i in self.ports:
                    for j in self.ports:
                        if i != j:
                            self.links[(i, j)] = TcpProxy(self.addr(j))
            for i in self.ports:
                self.start(i)
            if not self._port_taken() or attempt == BIND_ATTEMPTS - 1:
                break
            self._discard()     # another test's server took a port after free_ports chose it

    def _port_taken(self, timeout=20.0):
        """Until every replica listens: True when one exited because its port was taken."""
        end = time.monotonic() + timeout
        waiting = set(self.ports)
        while waiting and time.monotonic() < end:
            for i in list(waiting):
                log = (self.tmp / f"meta{i}.log").read_bytes()
                if b"listening on" in log:
                    waiting.discard(i)
                elif self.procs[i].poll() is not None:
                    return b"address already in use" in log
            time.sleep(0.02)
        return False

    def _discard(self):
        """Throw away a group that never ran: its processes, proxies, logs and directories."""
        import shutil
        self.stop(signal.SIGKILL)
        self.procs.clear()
        for link in self.links.values():
            link.close()
        self.links.clear()
        for i in self.ports:
            (self.tmp / f"meta{i}.log").unlink(missing_ok=True)
            shutil.rmtree(self.tmp / f"m{i}", ignore_errors=True)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def addrs(self):
        return ",".join(self.addr(i) for i in self.ports)

    def peers(self, i=None):
        """The --peers of replica i: itself at its own port, the others through its proxies."""
        def at(j):
            return self.links[(i, j)].address if (i, j) in self.links else self.addr(j)
        return ",".join(f"{j}={at(j)}" for j in self.ports)

    def start(self, i):
        log = open(self.tmp / f"meta{i}.log", "ab")
        clock = ["--clock-file", str(self.clock_file)] if self.clock_file else []
        join = ["--join"] if i in self.joined else []
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "meta", "serve", "--raft", "--id", str(i), "--peers", self.peers(i), "--listen", self.addr(i),
             "--dir", str(self.tmp / f"m{i}"), "--tick", TICK, *clock, *join, *self.extra],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def add(self, i):
        """Start replica i on a new port with --join: it serves once `meta member add --learner` adds it."""
        assert i not in self.ports and not self.links
        self.ports[i] = free_ports(1)[0]
        self.joined.add(i)
        self.start(i)

    # ------------------------------------------------------------------ partitions (proxied=True)
    def cut(self, i, j):
        """No byte between replicas i and j, either way (each end sees a silent peer)."""
        self.links[(i, j)].blackhole(True)
        self.links[(j, i)].blackhole(True)

    def isolate(self, i):
        for j in self.ports:
            if j != i:
                self.cut(i, j)

    def heal(self):
        for p in self.links.values():
            p.blackhole(False)

    def kill(self, i, sig=signal.SIGKILL):
        p = self.procs.pop(i)
        p.send_signal(sig)
        p.wait(timeout=30)

    def freeze(self, i):
        """SIGSTOP replica i (it keeps its sockets; peers and clients see a silent process)."""
        freeze(self.procs[i].pid)

    def thaw(self, i):
        self.procs[i].send_signal(signal.SIGCONT)

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
        for p in self.links.values():
            p.close()


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
