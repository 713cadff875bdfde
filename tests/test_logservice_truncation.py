"""The truncation workflow: truncate() only records the LSN; the worker deletes whole segments
below min(truncated LSN, every registered reader's replayed LSN), in the background."""
from __future__ import annotations

import os
import time

import pytest

from logtide import InvalidRange, LogService

pytestmark = pytest.mark.timeout(120)


def seg_files(path):
    return sorted(int(f[:-4]) for f in os.listdir(path) if f.endswith(".log"))


def fill(svc, n=400):
    for i in range(n):
        svc.append(b"%05d" % i * 10)


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_truncate_only_records_the_lsn(tmp_path):
    with LogService.open(tmp_path, segment_size=2048, truncation_interval=0) as svc:
        fill(svc)
        before = seg_files(tmp_path)
        svc.truncate(300)
        assert seg_files(tmp_path) == before  # no worker: nothing deleted yet
        assert svc.run_truncation() > 0
        after = seg_files(tmp_path)
        assert after[0] <= 301 and len(after) < len(before)
        # every deleted segment lay wholly at or below the truncated LSN
        assert all(first <= 300 for first in before if first not in after)
        with pytest.raises(InvalidRange):
            svc.read(after[0] - 1 if after[0] > 1 else 1, 100)
        assert svc.read(301, 100)[0][0].lsn == 301


def test_background_worker_deletes(tmp_path):
    with LogService.open(tmp_path, segment_size=2048, truncation_interval=0.05) as svc:
        fill(svc)
        n = len(seg_files(tmp_path))
        svc.truncate(400)
        assert wait_for(lambda: len(seg_files(tmp_path)) == 1)  # the segment being written stays
        assert n > 1
        assert svc.append(b"more") == 401


def test_registered_reader_holds_segments(tmp_path):
    with LogService.open(tmp_path, segment_size=2048, truncation_interval=0.05) as svc:
        svc.register_reader("ro-1")
        fill(svc)
        before = seg_files(tmp_path)
        svc.truncate(390)
        time.sleep(0.3)
        assert seg_files(tmp_path) == before  # ro-1 has replayed nothing
        svc.report_replayed("ro-1", 100)
        assert wait_for(lambda: seg_files(tmp_path) != before)
        left = seg_files(tmp_path)
        # the segment holding LSN 101 is still there; everything it needs can be read
        assert left[0] <= 101
        assert svc.read(101, 100)[0][0].lsn == 101
        svc.unregister_reader("ro-1")
        assert wait_for(lambda: seg_files(tmp_path)[0] > 101)
        assert seg_files(tmp_path)[0] <= 391


def test_reader_position_survives_restart(tmp_path):
    with LogService.open(tmp_path, segment_size=2048, truncation_interval=0) as svc:
        svc.register_reader("tn")
        fill(svc)
        svc.report_replayed("tn", 50)
        svc.truncate(399)
    with LogService.open(tmp_path, segment_size=2048, truncation_interval=0) as svc:
        assert svc.readers() == {"tn": 50}
        svc.run_truncation()
        assert seg_files(tmp_path)[0] <= 51
        assert svc.read(51, 10)[0][0].lsn == 51


def test_a_service_dropped_unclosed_is_collected_and_its_directory_reopens(tmp_path):
    """The worker holds the service weakly: dropping the last reference closes the service (its
    threads end, the directory lock goes), also when that happens on the worker's own thread."""
    import weakref
    from lifetime import collected, thread_names, threads_back_to
    before = thread_names("logservice-")
    for rnd in range(20):
        svc = LogService.open(tmp_path, segment_size=2048, truncation_interval=0.001 if rnd else 0.05)
        assert svc.append(b"round %d" % rnd) == rnd + 1
        if rnd:
            svc.truncate(rnd)    # the worker has segments to look at, so its rounds take a while
        ref = weakref.ref(svc)
        del svc              # the worker may be in a round, holding it: then it closes it there
        assert collected(ref), "the dropped service stayed alive"
    assert threads_back_to(before, "logservice-"), thread_names("logservice-")
    with LogService.open(tmp_path) as svc:   # nothing of the dropped services holds the directory
        assert svc.get_latest_lsn() == 20
        assert svc.read(20, 100)[0][0].data.endswith(b"round 19")


def test_the_worker_stops_itself_when_its_owner_goes_during_a_round():
    """The last reference to the owner can go while the worker runs its step: the owner is then
    finalized on the worker's thread, and its stop() must end the worker there (no self-join)."""
    import threading
    import weakref
    from logtide.engine.logservice.truncation import TruncationWorker
    entered, seen = threading.Event(), {}

    class Owner:
        def __init__(self):
            self.worker = TruncationWorker(weakref.WeakMethod(self.step), 0.001)

        def step(self):
            entered.set()
            time.sleep(0.2)     # main drops its reference meanwhile
            return 0

        def __del__(self):
            seen["thread"] = threading.current_thread().name
            try:
                self.worker.stop()
                seen["stopped"] = True
            except BaseException as exc:  # noqa: BLE001 - reported below
                seen["stopped"] = exc

    owner = Owner()
    worker = owner.worker
    assert entered.wait(5)
    del owner
    assert wait_for(lambda: "stopped" in seen, timeout=5)
    assert seen == {"thread": "logservice-truncation", "stopped": True}
    assert wait_for(lambda: not worker.is_alive(), timeout=5)
