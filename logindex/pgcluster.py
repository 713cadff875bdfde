"""A throwaway PostgreSQL 15 cluster that runs pgbench, to produce real WAL segments.

Used by the PostgreSQL WAL tests, benchmarks and the demo. PostgreSQL refuses to run as root, so
as root the server commands run as the `postgres` user (runuser).
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PG_BIN = Path(os.environ.get("LOGTIDE_PG_BIN", "/usr/lib/postgresql/15/bin"))
TOOLS = ("initdb", "pg_ctl", "pgbench", "pg_waldump", "postgres")


def pg_available() -> str | None:
    """None when PostgreSQL 15 can run here, else the reason it cannot."""
    missing = [t for t in TOOLS if not (PG_BIN / t).exists()]
    if missing:
        return f"PostgreSQL binaries missing in {PG_BIN}: {', '.join(missing)}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def make_pgbench_wal(workdir: Path, scale: int = 1, seconds: int = 3, clients: int = 2,
                     wal_segsize_mb: int = 16, wal_keep_mb: int = 0) -> Path:
    """Run initdb, pgbench -i -s scale and pgbench -T seconds, stop the server cleanly; return
    a copy of the cluster's pg_wal directory (readable by the caller). wal_segsize_mb is initdb's
    --wal-segsize (small segments give many segment files and records that cross them);
    wal_keep_mb keeps that much old WAL in pg_wal past checkpoints (wal_keep_size)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # the cluster runs in its own directory right under the temp root: the server user must reach it,
    # and a parent such as /tmp/pytest-of-root may be chmod 700'ed by any pytest run meanwhile
    run_dir = Path(tempfile.mkdtemp(prefix="logtide-pgrun-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(run_dir, pw.pw_uid, pw.pw_gid)
    try:
        return _run_cluster(run_dir, workdir, scale, seconds, clients, wal_segsize_mb, wal_keep_mb)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_cluster(run_dir: Path, workdir: Path, scale: int, seconds: int, clients: int,
                 wal_segsize_mb: int = 16, wal_keep_mb: int = 0) -> Path:
    data, sock = run_dir / "data", run_dir / "sock"
    port = _free_port()
    _run([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
          "--locale=C", f"--wal-segsize={wal_segsize_mb}"], 120)
    _run(["mkdir", "-p", str(sock)], 10)
    _run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(run_dir / "server.log"),
          "-o", f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off -c max_wal_size=256MB "
                f"-c wal_keep_size={wal_keep_mb}MB", "start"], 90)
    try:
        common = ["-h", str(sock), "-p", str(port), "-U", "postgres"]
        _run([str(PG_BIN / "pgbench"), "-i", "-s", str(scale), "-q", *common, "postgres"], 180)
        if seconds > 0:
            _run([str(PG_BIN / "pgbench"), "-T", str(seconds), "-c", str(clients), *common, "postgres"],
                 seconds + 60)
    finally:
        _run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-m", "fast", "stop"], 90)
    out = workdir / "pg_wal"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    for f in sorted((data / "pg_wal").iterdir()):
        if f.is_file():
            shutil.copy(f, out / f.name)
    return out
