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
