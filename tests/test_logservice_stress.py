"""Many appenders on the Cython wait path at once: acknowledged records are durable, dense, in order,
readable while others append; close() in the middle of it wakes every appender."""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from logtide import LogService
from logtide.errors import LogServiceClosed

pytestmark = pytest.mark.timeout(180)

JOIN = 60.0  # seconds: an appender that has not returned by then hangs


def _payload(t: int, i: int, k: int = 0) -> bytes:
    return b"%d.%d.%d." % (t, i, k) + bytes([t]) * ((t * 7 + i) % 97)


@pytest.mark.parametrize("fsync", ["always", "batch"])
def test_32_appenders_with_readers_then_close_midway(tmp_path, fsync):
    svc = LogService.open(tmp_path, fsync=fsync, segment_size=64 << 10, truncation_interval=0)
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    closed_seen = []
    errors = []
    stop_readers = threading.Event()
    go = threading.Barrier(33)

    def appender(t: int) -> None:
        rnd = random.Random(t)
        go.wait()
        try:
            for i in range(10_000):
                kind = rnd.random()
                if kind < 0.7:
                    p = _payload(t, i)
                    got = {svc.append(p, replica_id=t): p}
                elif kind < 0.9:
                    ps = [_payload(t, i, k) for k in range(rnd.randint(2, 5))]
                    first = svc.append_many(ps, replica_id=t)
                    got = {first + k: p for k, p in enumerate(ps)}
                else:
                    rows = np.full((3, 16), t, np.uint8)
                    rows[:, 0] = np.arange(3)
                    first = svc.append_many(rows, replica_id=t)
                    got = {first + k: rows[k].tobytes() for k in range(3)}
                with lock:
                    assert not acked.keys() & got.keys(), "an LSN handed out twice"
                    acked.update(got)
        except LogServiceClosed:
            closed_seen.append(t)
        except BaseException as exc:  # noqa: B902 - reported by the test
            errors.append(exc)

    def reader() -> None:
        """Whatever is visible is complete: every LSN up to the latest reads back, in order."""
        lsn = 1
        try:
            while not stop_readers.is_set():
                latest = svc.get_latest_lsn()
                while lsn <= latest:
                    recs, nxt = svc.read(lsn, 1 << 16)
                    assert [r.lsn for r in recs] == list(range(lsn, nxt))
                    lsn = nxt
        except LogServiceClosed:
            pass
        except BaseException as exc:  # noqa: B902
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(t,)) for t in range(32)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads + readers:
        th.start()
    go.wait()
    # let them run until a few thousand records are in (a few segments), then close under load
    while svc.get_latest_lsn() < 3000 and not errors:
        time.sleep(0.01)
    stop_readers.set()
    for th in readers:
        th.join(JOIN)
    svc.close()
    for th in threads:
        th.join(JOIN)
        assert not th.is_alive(), "an appender still waits after close()"
    assert not errors, errors[0]
    assert len(closed_seen) == 32  # every appender was stopped by the close, none hung or failed

    with LogService.open(tmp_path, fsync=fsync, segment_size=64 << 10) as again:
        latest = again.get_latest_lsn()
        assert sorted(acked) == list(range(1, latest + 1)), "dense, and close() acknowledged all it wrote"
        lsn, seen = 1, {}
        while lsn <= latest:
            recs, lsn = again.read(lsn, 1 << 20)
            seen.update((r.lsn, r.payload) for r in recs)
        assert seen == acked
        assert again.stats()["segments"] > 2  # the writer rolled segments under load
