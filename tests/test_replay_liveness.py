"""Replica liveness on the primary (issue 10, bug 1): an RO node that closes its link, dies or stops
reporting is dropped after `replica_timeout`, so it no longer pins the flush limit or truncation, and
the primary's writes never stall on it. A dropped node that comes back re-syncs from storage."""
import threading
import time

import pytest

from logtide.engine.logservice import LogService
from logtide.errors import PeerTimeoutError, ReplicaDroppedError, ReplicaTimeoutError
from logtide.replay import Primary, ReadOnlyNode, connect_inprocess
from logtide.replay.buffer_pool import BufferPool, PinTimeoutError

REL = 16384


def _insert_in_thread(p, n, size=8000):
    done = []

    def run():
        for _ in range(n):
            p.insert(REL, bytes(size))
        done.append(True)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, done


@pytest.mark.timeout(60)
def test_closed_ro_node_does_not_stall_the_primary(tmp_path):
    """The issue's reproduction: close the RO node, then fill the pool with pages newer than its report."""
    log = LogService.open(tmp_path / "log")
    p = Primary(tmp_path, log=log, pool_pages=8, checkpoint_interval=0.05, replica_timeout=1.0)
    p.pool.pin_wait_s = 1.0
    ro = ReadOnlyNode(tmp_path, log, node_id=1, feedback_interval=0.05)
    link = connect_inprocess(p, ro)
    try:
        p.insert(REL, b"x")
        assert ro.wait_applied(p.write_lsn)
        time.sleep(0.3)
        link.close()
        ro.close()                       # the RO node is gone
        t, done = _insert_in_thread(p, 20)
        t.join(20)
        assert not t.is_alive() and done, "the primary's inserts blocked on a closed RO node"
        assert 1 not in p.replicas
        assert p.stats()["replicas_dropped"] == 1
    finally:
        p.close()
        log.close()


@pytest.mark.timeout(60)
def test_silent_ro_node_is_dropped_after_the_timeout_and_resyncs(tmp_path, caplog):
    """A node whose reports stop (a dead or stopped process keeps its link open) is dropped after
    replica_timeout; when it reports again it is told so, and re-syncs from storage."""
    log = LogService.open(tmp_path / "log")
    p = Primary(tmp_path, log=log, pool_pages=8, checkpoint_interval=0.05, replica_timeout=0.5)
    p.pool.pin_wait_s = 2.0
    ro = ReadOnlyNode(tmp_path, log, node_id=7, feedback_interval=3600)   # reports never come
    link = connect_inprocess(p, ro)
    try:
        with caplog.at_level("WARNING", logger="logtide.replay.primary"):
            t, done = _insert_in_thread(p, 30)
            t.join(20)
            assert done, "the primary's inserts blocked on a silent RO node"
            deadline = time.monotonic() + 5
            while 7 in p.replicas and time.monotonic() < deadline:
                time.sleep(0.05)
        assert 7 not in p.replicas
        assert p.stats()["replicas_dropped"] == 1
        assert any("dropped" in r.getMessage() and "7" in r.getMessage() for r in caplog.records)
        with pytest.raises(ReplicaDroppedError):
            p.feedback(ro.feedback_message())
        # the node comes back: it re-syncs (cache dropped, waits for the primary's write LSN) and serves
        ro.send_feedback()
        deadline = time.monotonic() + 10
        while ro.counts["resyncs"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ro.counts["resyncs"] == 1
        assert 7 in p.replicas
        tid = p.insert(REL, b"after the resync")
        assert ro.wait_applied(p.write_lsn)
        assert ro.get(REL, tid) == b"after the resync"
        assert dict(ro.scan(REL)) == dict(p.scan(REL))
    finally:
        link.close()
        ro.close()
        p.close()
        log.close()


def test_wait_applied_ends_in_a_typed_error_at_its_deadline(tmp_path):
    log = LogService.open(tmp_path / "log")
    p = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1)
    link = connect_inprocess(p, ro)
    try:
        p.insert(REL, b"x")
        assert ro.wait_applied(p.write_lsn, timeout=10)
        t0 = time.monotonic()
        with pytest.raises(ReplicaTimeoutError) as info:
            ro.wait_applied(p.write_lsn + 1000, timeout=0.3)   # LSNs nobody wrote
        assert isinstance(info.value, PeerTimeoutError) and isinstance(info.value, TimeoutError)
        assert time.monotonic() - t0 < 5
    finally:
        link.close()
        ro.close()
        p.close()
        log.close()


def test_pin_gives_up_at_its_deadline_even_when_write_outs_are_refused():
    """BufferPool.pin waited forever when every dirty victim refused its write-out: the deadline of
    `pin_wait_s` was restarted on every retry."""
    pool = BufferPool(4, evict_dirty=lambda tag, page: False)
    for b in range(4):
        f, _ = pool.pin((1, 1, 1, 0, b), lambda t, fr: None)
        pool.mark_dirty(f, b + 1)
        pool.unpin(f)
    pool.pin_wait_s = 0.5
    t0 = time.monotonic()
    with pytest.raises(PinTimeoutError):
        pool.pin((1, 1, 1, 0, 99), lambda t, fr: None)
    assert time.monotonic() - t0 < 5
