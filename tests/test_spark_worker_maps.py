"""SegmentMaps (one mapping of each segment per replay, shared by its scan and redo) and
worker_maps (a scan task's maps left to the same job's redo task in a reused Spark worker),
against the files themselves. No Spark needed: the worker side is plain module state."""
import os

import pytest

from logtide._ext import xlogwriter as xw
from logtide.engine.logservice import LogService
from logtide.spark import worker_maps
from logtide.spark.errors import SegmentMissingError
from logtide.spark.log_segments import SegmentMaps, block_refs, list_log_segments, scan_segment


def _log(tmp_path, n=40):
    log = LogService.open(tmp_path, fsync="never", segment_size=2048)
    for i in range(0, n, 5):          # a segment rolls between appends
        log.append_many([xw.heap_insert((1663, 5, 16384, 0, k % 7), 1, b"t" * 100) for k in range(i, i + 5)])
    log.close()
    return list_log_segments(str(tmp_path))


def test_segment_maps_map_each_file_once_and_close_together(tmp_path):
    segs = _log(tmp_path)
    assert len(segs) > 2
    maps = SegmentMaps()
    scanned = [scan_segment(s, records=True, maps=maps) for s in segs]
    assert all(s.buf is maps.get(seg.path) for s, seg in zip(scanned, segs))
    want = [block_refs(scan_segment(seg))["lsn"].tolist() for seg in segs]
    assert [block_refs(s)["lsn"].tolist() for s in scanned] == want
    bufs = [maps.get(seg.path) for seg in segs]
    del scanned
    maps.close()
    assert all(b.closed for b in bufs)
    maps.close()                                  # twice is harmless


def test_a_missing_segment_through_maps_is_a_typed_error(tmp_path):
    segs = _log(tmp_path)
    os.remove(segs[1].path)
    with pytest.raises(SegmentMissingError, match="disappeared"):
        scan_segment(segs[1], maps=SegmentMaps())


def test_worker_maps_hold_one_job_and_hand_it_to_its_redo(tmp_path):
    segs = _log(tmp_path)
    a = worker_maps.for_scan("job-a")
    assert worker_maps.for_scan("job-a") is a and worker_maps.held() == 1
    b0 = a.get(segs[0].path)
    taken = worker_maps.take("job-a")             # the redo task of the same job gets them
    assert taken is a and worker_maps.held() == 0 and not b0.closed
    taken.close()
    stale = worker_maps.for_scan("job-b")         # a job whose redo never came to this worker
    b1 = stale.get(segs[1].path)
    fresh = worker_maps.take("job-c")             # the next job's task closes them
    assert b1.closed and worker_maps.held() == 0 and fresh is not stale
    fresh.close()
    c = worker_maps.for_scan("job-d")
    bc = c.get(segs[2].path)
    d = worker_maps.for_scan("job-e")
    assert worker_maps.held() == 1 and bc.closed and d is not c
    worker_maps.take("job-e").close()
