"""PostgreSQL 15 as the durable-write peer: a throwaway server with fsync=on and
synchronous_commit=on in a temporary directory, and sustained pgbench runs of a custom script
against it (`pgbench -T`: its tps without initial connection time, and its per-second progress).

As root the server commands run as the `postgres` user, with a data and socket directory it owns.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.sustained import SustainedRun
from logtide.logindex.pgcluster import PG_BIN, pg_available

__all__ = ["PgPeer", "pg_available"]


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _run(cmd: list[str], timeout: float, both: bool = False):
    p = subprocess.run(_as_postgres(cmd), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return (p.stdout, p.stderr) if both else p.stdout


_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
_DONE = re.compile(r"number of transactions actually processed: (\d+)")
_PROGRESS = re.compile(r"progress: ([0-9.]+) s, ([0-9.]+) tps")


class PgPeer:
    """A running PostgreSQL server (durable commits) on a Unix socket; use as a context manager."""

    def __init__(self, max_connections: int = 64) -> None:
        self.max_connections = max_connections
        self.dir = Path(tempfile.mkdtemp(prefix="logtide-pgpeer-"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data, self.sock = self.dir / "data", self.dir / "sock"
        self.port = 5432

    def __enter__(self) -> "PgPeer":
        try:
            _run([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--locale=C"], 180)
            _run(["mkdir", "-p", str(self.sock)], 10)
            opts = (f"-k {self.sock} -p {self.port} -c listen_addresses='' -c fsync=on -c synchronous_commit=on "
                    f"-c max_connections={self.max_connections} -c shared_buffers=128MB")
            _run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "90", "-l", str(self.dir / "server.log"),
                  "-o", opts, "start"], 120)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            _run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-m", "immediate", "stop"], 90)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _common(self) -> list[str]:
        return ["-h", str(self.sock), "-p", str(self.port), "-U", "postgres"]

    def sql(self, statement: str) -> str:
        return _run([str(PG_BIN / "psql"), *self._common(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement,
                     "postgres"], 60)

    def server_pids(self) -> list[int]:
        """The postmaster and every process it has started (backends, walwriter, checkpointer...)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
        return [postmaster, *map(int, children)]

    def confine(self, cpus) -> None:
        """Run the server on `cpus` (every process of it; backends forked later inherit it)."""
        for pid in self.server_pids():
            try:
                os.sched_setaffinity(pid, cpus)
            except ProcessLookupError:
                pass

    def pgbench(self, script: str, clients: int, seconds: int, cpus=None) -> SustainedRun:
        """Run `script` (pgbench syntax) with `clients` connections for `seconds` (pgbench -T, whole
        seconds); its steady rate is the tps pgbench reports without initial connection time, its
        per-second series the -P 1 progress lines. pgbench fails on any error. With `cpus`, the
        server and pgbench run on those CPUs only (the server is given all of them back after)."""
        path = self.dir / f"script-{clients}.sql"
        path.write_text(script)
        os.chmod(path, 0o644)
        seconds = max(1, int(round(seconds)))
        cmd = [str(PG_BIN / "pgbench"), *self._common(), "-n", "-c", str(clients), "-j", str(min(clients, 4)),
               "-T", str(seconds), "-P", "1", "-f", str(path), "postgres"]
        if cpus:
            self.confine(cpus)
            cmd = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *cmd]
        try:
            out, err = _run(cmd, seconds + 600, both=True)
        finally:
            if cpus:
                self.confine(os.sched_getaffinity(0))
        tps, done = _TPS.search(out), _DONE.search(out)
        if not tps or not done:
            raise RuntimeError(f"pgbench printed no tps or transaction count:\n{out[-2000:]}")
        rate, ops = float(tps.group(1)), int(done.group(1))
        per_second = [float(m.group(2)) for m in _PROGRESS.finditer(err)]
        # the time pgbench's own figure covers: its transactions over its rate
        return SustainedRun(clients, ops / rate if rate > 0 else float(seconds), ops, per_second)
