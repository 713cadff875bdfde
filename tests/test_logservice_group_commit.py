"""Group commit: concurrent appenders share fdatasyncs, and a failed write fails every waiter cleanly."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from logtide import LogService

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
def test_concurrent_appends_share_groups_and_stay_dense(tmp_path, fsync):
    svc = LogService.open(tmp_path, fsync=fsync, segment_size=16 << 10)
    got = {}
    lock = threading.Lock()
    start = threading.Barrier(16)

    def work(t):
        start.wait()
        for i in range(30):
            if i % 3 == 2:
                first = svc.append_many([b"%d.%d.a" % (t, i), b"%d.%d.b" % (t, i)], replica_id=t)
                pairs = [(first, b"%d.%d.a" % (t, i)), (first + 1, b"%d.%d.b" % (t, i))]
            else:
                pairs = [(svc.append(b"%d.%d" % (t, i), replica_id=t), b"%d.%d" % (t, i))]
            with lock:
                got.update(pairs)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    n = 16 * (20 + 2 * 10)
    assert sorted(got) == list(range(1, n + 1))
    st = svc.stats()
    if fsync == "always":
        assert st["groups"] < 16 * 30  # appenders shared flushes (one fdatasync per group)
    svc.close()
    with LogService.open(tmp_path, segment_size=16 << 10) as again:
        lsn, recs = 1, []
        while lsn <= n:
            batch, lsn = again.read(lsn, 1 << 16)
            recs += batch
        assert {r.lsn: r.payload for r in recs} == got


FAULT = textwrap.dedent("""
    import resource, signal, sys, threading
    from logtide import LogService
    from logtide.errors import LogServiceFailed, LogServiceError
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    path, fsync, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    svc = LogService.open(path, segment_size=1 << 30, fsync=fsync)
    for i in range(10):
        svc.append(b"ok%d" % i)
    size = 10 * (20 + 12 + 3)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 2000, resource.RLIM_INFINITY))
    failures = []
    def work(t):
        try:
            for i in range(1000):
                svc.append(b"x" * 100)
        except LogServiceFailed as e:
            failures.append(type(e).__name__)
    ths = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    [t.start() for t in ths]; [t.join() for t in ths]
    assert len(failures) == nthreads, failures   # every appender got the typed error, none hung
    try:
        svc.append(b"after")
        raise SystemExit("append after a failed write must fail")
    except LogServiceFailed:
        pass
    recs, _ = svc.read(1, 1 << 20)                # what was durable stays readable
    assert [r.payload for r in recs[:10]] == [b"ok%d" % i for i in range(10)], recs[:10]
    print("direct", svc.stats()["direct_writes"], "latest", svc.get_latest_lsn(), flush=True)
    svc.close()
""")


@pytest.mark.parametrize("fsync,nthreads", [("always", 8), ("never", 8), ("never", 1)])
def test_failed_write_fails_all_waiters_and_recovers(tmp_path, fsync, nthreads):
    """A failed write (EFBIG) fails the queue: with "never" a lone appender's own write fails it too."""
    path = str(tmp_path / "log")
    p = subprocess.run([sys.executable, "-c", FAULT, path, fsync, str(nthreads)], capture_output=True, text=True,
                       timeout=60, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    latest = int(p.stdout.split()[-1])
    if fsync == "never" and nthreads == 1:
        assert int(p.stdout.split()[-3]) >= 10  # the lone appender wrote its records itself, the failed one too
    with LogService.open(path) as svc:  # reopen without the limit: a clean log, appends continue
        assert svc.get_latest_lsn() >= latest >= 10
        recs, _ = svc.read(1, 1 << 20)
        assert [r.payload for r in recs[:10]] == [b"ok%d" % i for i in range(10)]
        assert svc.append(b"again") == svc.get_latest_lsn()
