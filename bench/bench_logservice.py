"""The log service: group commit against one appender and against sqlite3 WAL (synchronous=FULL),
sequential read from the page cache, and the gRPC transport beside the in-process one.

Every append benchmark uses fsync="always": each acknowledged record is on disk."""
from __future__ import annotations

import os
import sqlite3
import time

import pytest

from bench.client_threads import Threads
from bench.conftest import scaled
from bench.ratios import Ratio
from bench.server_process import start_server

RATIOS = [
    Ratio("log append: 32 appenders (group commit) vs 1 appender, fsync=always, 256 B",
          "test_append_32_threads_fsync_always", "test_append_1_thread_fsync_always", 10.0, 4),
    Ratio("log append: 32 appenders (group commit) vs sqlite3 WAL synchronous=FULL, 32 threads, 256 B",
          "test_append_32_threads_fsync_always", "test_sqlite_wal_full_32_threads", 3.0, 4),
    Ratio("log append, 1 appender, fsync=never: the appender writes its record itself vs handing it to the "
          "flusher thread and waiting to be woken (what every append did before), 256 B",
          "test_append_1_thread_fsync_never_inproc", "test_append_1_thread_fsync_never_via_flusher", None, 13),
    Ratio("fdatasync after a 2 KiB write: pre-filled segment (zeros written ahead) vs a growing file",
          "test_fdatasync_prefilled", "test_fdatasync_growing", None, 13),
    Ratio("fdatasync after a 2 KiB write: pre-filled segment vs fallocate'd (unwritten extents)",
          "test_fdatasync_prefilled", "test_fdatasync_fallocated", None, 13),
]

THREADS = 32
PAYLOAD = b"\xa5" * 256


@pytest.fixture
def threads():
    pool = Threads(THREADS)
    yield pool
    pool.close()


@pytest.mark.benchmark(group="logservice-append")
def test_append_32_threads_fsync_always(benchmark, items, tmp_path, threads):
    from logtide import LogService
    per = max(4, scaled(3200, minimum=128) // THREADS)
    n = items(per * THREADS)
    cpu = [0.0]
    with LogService.open(tmp_path / "log", fsync="always") as svc:
        def run():
            c0 = time.process_time()
            threads.run(lambda t: [svc.append(PAYLOAD, replica_id=t) for _ in range(per)])
            cpu[0] += time.process_time() - c0
        g0, l0 = svc.stats()["groups"], svc.get_latest_lsn()
        benchmark(run)
        st = svc.stats()
        benchmark.extra_info["figures"] = {
            "records_per_fsync": (st["latest_lsn"] - l0) / max(1, st["groups"] - g0), "appends_per_round": n,
            "cpu_us_per_append": 1e6 * cpu[0] / max(1, st["latest_lsn"] - l0), "load_avg_1m": os.getloadavg()[0]}


@pytest.mark.benchmark(group="logservice-append")
def test_append_1_thread_fsync_always(benchmark, items, tmp_path):
    from logtide import LogService
    n = items(scaled(400, minimum=20))
    with LogService.open(tmp_path / "log", fsync="always") as svc:
        def run():
            for _ in range(n):
                svc.append(PAYLOAD)
        benchmark(run)


@pytest.mark.benchmark(group="logservice-append")
def test_sqlite_wal_full_32_threads(benchmark, items, tmp_path, threads):
    per = max(2, scaled(400, minimum=64) // THREADS)
    items(per * THREADS)
    path = str(tmp_path / "log.sqlite")
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE TABLE log (lsn INTEGER PRIMARY KEY AUTOINCREMENT, replica INTEGER, payload BLOB)")
    conns = []
    for _ in range(THREADS):
        c = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA synchronous=FULL")  # per connection: fsync the WAL at every commit
        conns.append(c)

    def run():
        def body(t):
            c = conns[t]
            for _ in range(per):
                c.execute("INSERT INTO log (replica, payload) VALUES (?, ?)", (t, PAYLOAD))  # one txn each
        threads.run(body)

    try:
        benchmark(run)
    finally:
        for c in conns:
            c.close()


# --- sequential read from the page cache -----------------------------------------------------------

def _filled(path, record_size: int, total: int):
    from logtide import LogService
    svc = LogService.open(path, fsync="never", truncation_interval=0)
    n = max(1, total // record_size)
    batch = [os.urandom(record_size)] * 256
    while svc.get_latest_lsn() < n:
        svc.append_many(batch[: min(256, n - svc.get_latest_lsn())])
    svc.sync()
    return svc


def _read_all_batches(client, max_size=4 << 20) -> int:
    lsn, latest, total = 1, client.get_latest_lsn(), 0
    while lsn <= latest:
        b = client.read_batch(lsn, max_size)
        total += b.data_bytes()
        lsn = b.next_lsn
    return total


def _read_all_records(client, max_size=4 << 20) -> int:
    lsn, latest, total = 1, client.get_latest_lsn(), 0
    while lsn <= latest:
        recs, lsn = client.read(lsn, max_size)
        total += sum(len(r.data) for r in recs)
    return total


@pytest.fixture(scope="module")
def log_4k(tmp_path_factory):
    svc = _filled(tmp_path_factory.mktemp("read4k") / "log", 4096, scaled(128 << 20, minimum=4 << 20))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def log_256(tmp_path_factory):
    svc = _filled(tmp_path_factory.mktemp("read256") / "log", 256, scaled(32 << 20, minimum=1 << 20))
    yield svc
    svc.close()


def _mb_s(benchmark, nbytes):
    return {"MB_per_s": nbytes / benchmark.stats.stats.min / 1e6, "data_MB": nbytes / 1e6, "goal_MB_per_s": 500.0}


@pytest.mark.benchmark(group="logservice-read")
def test_read_batch_4k_inproc(benchmark, items, log_4k):
    total = _read_all_batches(log_4k)
    items(total)  # items are bytes: items/s is bytes/s
    benchmark(_read_all_batches, log_4k)
    benchmark.extra_info["figures"] = _mb_s(benchmark, total)


@pytest.mark.benchmark(group="logservice-read")
def test_read_batch_256_inproc(benchmark, items, log_256):
    total = _read_all_batches(log_256)
    items(total)
    benchmark(_read_all_batches, log_256)
    benchmark.extra_info["figures"] = _mb_s(benchmark, total)


@pytest.mark.benchmark(group="logservice-read")
def test_read_records_4k_inproc(benchmark, items, log_4k):
    total = _read_all_records(log_4k)
    items(total)
    benchmark(_read_all_records, log_4k)
    benchmark.extra_info["figures"] = _mb_s(benchmark, total)


@pytest.mark.benchmark(group="logservice-read")
def test_read_records_256_inproc(benchmark, items, log_256):
    total = _read_all_records(log_256)
    items(total)
    benchmark(_read_all_records, log_256)
    benchmark.extra_info["figures"] = _mb_s(benchmark, total)


@pytest.mark.benchmark(group="logservice-read")
def test_file_read_4k_ceiling(benchmark, items, log_4k):
    """Plain reads of the same segment files in 4 MiB chunks: what the page cache gives at most."""
    paths = sorted(os.path.join(log_4k.config().dir, f) for f in os.listdir(log_4k.config().dir)
                   if f.endswith(".log"))

    def run():
        total = 0
        for p in paths:
            with open(p, "rb", buffering=0) as f:
                while chunk := f.read(4 << 20):
                    total += len(chunk)
        return total

    items(run())
    benchmark(run)
    benchmark.extra_info["figures"] = _mb_s(benchmark, run())


# --- gRPC beside in-process -----------------------------------------------------------------------
# The server runs as `logtide logservice serve` in its own process, as deployed: client and server
# do not share a GIL. The client speaks gRPC to its --grpc-listen port (carrier="grpc"); the framed
# carrier's figures are bench_wire_floor's.

class _Served:
    def __init__(self, path, **flags):
        import shutil
        import sys
        from pathlib import Path
        exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
        cmd = ([exe] if exe else [sys.executable, "-m", "logtide"]) + [
            "logservice", "serve", "--dir", str(path), "--listen", "127.0.0.1:0", "--stats-interval", "0",
            "--grpc-listen", "127.0.0.1:0", "--max-message-size", str(64 << 20)] + [
            x for k, v in flags.items() for x in (f"--{k}", str(v))]
        self.proc, self.address = start_server(cmd, Path(path).parent, "gRPC on ")   # the gRPC port

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def grpc_4k(tmp_path_factory):
    from logtide import connect_logservice
    path = tmp_path_factory.mktemp("grpc4k") / "log"
    _filled(path, 4096, scaled(128 << 20, minimum=4 << 20)).close()
    server = _Served(path)
    client = connect_logservice(server.address, max_message_size=64 << 20, carrier="grpc")
    yield client
    client.close()
    server.stop()


@pytest.mark.benchmark(group="logservice-read")
def test_read_batch_4k_grpc(benchmark, items, grpc_4k):
    total = _read_all_batches(grpc_4k)
    items(total)
    benchmark(_read_all_batches, grpc_4k)
    benchmark.extra_info["figures"] = _mb_s(benchmark, total)


def _lone_appender_never(benchmark, items, path, direct: bool):
    from logtide import LogService
    n = items(scaled(20000, minimum=500))
    cpu = [0.0, 0]
    with LogService.open(path, fsync="never") as svc:
        if not direct:  # the log writer's queue, told to send every append through the flusher
            svc._writer.queue.configure(False, False, 0.0)

        def run():
            c0 = time.process_time()
            for _ in range(n):
                svc.append(PAYLOAD)
            cpu[0] += time.process_time() - c0
            cpu[1] += n
        benchmark(run)
        benchmark.extra_info["figures"] = {
            "cpu_us_per_append": 1e6 * cpu[0] / max(1, cpu[1]), "direct_writes": svc.stats()["direct_writes"],
            "load_avg_1m": os.getloadavg()[0]}


@pytest.mark.benchmark(group="logservice-append")
def test_append_1_thread_fsync_never_inproc(benchmark, items, tmp_path):
    """Without fsync: the per-call cost of the in-process path (framing, locking, write); a lone
    appender writes its own record."""
    _lone_appender_never(benchmark, items, tmp_path / "log", direct=True)


@pytest.mark.benchmark(group="logservice-append")
def test_append_1_thread_fsync_never_via_flusher(benchmark, items, tmp_path):
    """The same, each append handed to the flusher thread (two thread hand-offs per call)."""
    _lone_appender_never(benchmark, items, tmp_path / "log", direct=False)


@pytest.mark.benchmark(group="logservice-append")
def test_append_1_thread_fsync_batch_inproc(benchmark, items, tmp_path):
    """fsync="batch": append returns once written; the flusher syncs every 20 ms."""
    from logtide import LogService
    n = items(scaled(20000, minimum=500))
    with LogService.open(tmp_path / "log", fsync="batch") as svc:
        def run():
            for _ in range(n):
                svc.append(PAYLOAD)
        benchmark(run)


# --- what pre-allocation saves: one fdatasync after a small write ---------------------------------

FSYNC_WRITE = PAYLOAD * 8  # about one group of 8 records


def _fdatasync_loop(benchmark, items, path, prepare):
    n = items(scaled(200, minimum=20))
    size = n * len(FSYNC_WRITE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        def setup():
            os.ftruncate(fd, 0)
            prepare(fd, size)
            os.fsync(fd)

        def run():
            for k in range(n):
                os.pwrite(fd, FSYNC_WRITE, k * len(FSYNC_WRITE))
                os.fdatasync(fd)
        benchmark.pedantic(run, setup=setup, rounds=3)
    finally:
        os.close(fd)


@pytest.mark.benchmark(group="logservice-fdatasync")
def test_fdatasync_prefilled(benchmark, items, tmp_path):
    """What the writer does: zero bytes written (and synced) ahead, so a sync has only data to write."""
    def zeros(fd, size):
        os.pwrite(fd, bytes(size), 0)
    _fdatasync_loop(benchmark, items, tmp_path / "seg", zeros)


@pytest.mark.benchmark(group="logservice-fdatasync")
def test_fdatasync_growing(benchmark, items, tmp_path):
    """Without pre-allocation: every write extends the file, every sync commits its new size."""
    _fdatasync_loop(benchmark, items, tmp_path / "seg", lambda fd, size: None)


@pytest.mark.benchmark(group="logservice-fdatasync")
def test_fdatasync_fallocated(benchmark, items, tmp_path):
    """fallocate only: the size is set but the extents are unwritten; the first write into each
    still changes metadata."""
    _fdatasync_loop(benchmark, items, tmp_path / "seg", lambda fd, size: os.posix_fallocate(fd, 0, size))


@pytest.mark.benchmark(group="logservice-append")
def test_append_1_thread_fsync_never_grpc(benchmark, items, tmp_path):
    """The same over gRPC on 127.0.0.1: the per-call cost of the transport."""
    from logtide import connect_logservice
    n = items(scaled(2000, minimum=200))
    server = _Served(tmp_path / "log", fsync="never")
    client = connect_logservice(server.address, carrier="grpc")
    try:
        def run():
            for _ in range(n):
                client.append(PAYLOAD)
        benchmark(run)
    finally:
        client.close()
        server.stop()
