"""Primary group commit: single-record writes from many backends share fsyncs, with no lock held
across the fsync, and the result is exactly what serial writes would give (on the primary, on an RO
node that follows it, and after a restart)."""
import threading
import time

import pytest

from logtide.engine.logservice import LogService
from logtide.replay.meta_stream import decode_batch
from logtide.replay.primary import Primary
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess
from logtide.replay.wal_sender import meta_frames

REL = 16384
BACKENDS = 16


@pytest.mark.timeout(120)
def test_sixteen_backends_share_fsyncs(tmp_path):
    log = LogService.open(tmp_path / "log", truncation_interval=0)
    primary = Primary(tmp_path, log=log, checkpoint_interval=0.05)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, feedback_interval=0.05)
    link = connect_inprocess(primary, ro)
    per = 40
    written: dict[tuple, bytes] = {}
    moved: dict[tuple, tuple] = {}
    lock = threading.Lock()
    errors = []

    def backend(k):
        try:
            for i in range(per):
                data = f"{k}:{i}:".encode() * (1 + i % 7)
                tid = primary.insert(REL, data)
                if i % 8 == 7:     # grow it: it may move to another page (a two-page record)
                    new = primary.update(REL, tid, data * 30)
                    with lock:
                        moved[tid] = new
                    tid, data = new, data * 30
                with lock:
                    written[tid] = data
        except BaseException as exc:   # noqa: B902 - reported below
            errors.append(exc)
    # a WAL-meta sender streaming while the backends write: one message per batch of records
    stop, frames = threading.Event(), []

    def sender():
        for f in meta_frames(primary, 1, stop, heartbeat=0.01):
            b = decode_batch(f)
            if len(b):
                frames.append(b.lsns.tolist())
    ths = [threading.Thread(target=backend, args=(k,)) for k in range(BACKENDS)]
    snd = threading.Thread(target=sender)
    snd.start()
    try:
        for th in ths:
            th.start()
        for th in ths:
            th.join(90)
        assert not errors, errors[0]
        n_records = BACKENDS * per + BACKENDS * (per // 8)
        assert len(written) == BACKENDS * per and primary.write_lsn == n_records == log.get_latest_lsn()
        # writers queued while a group's fsync ran: no lock is held across it
        assert primary.committer.items == n_records and primary.committer.groups < n_records
        assert log.stats()["groups"] < n_records
        live = dict(primary.scan(REL))
        for old, new in moved.items():
            if old != new:
                assert old not in live
        assert live == written
        assert ro.wait_applied(primary.write_lsn, timeout=30)
        for tid, data in written.items():
            assert ro.get(REL, tid) == data
        deadline = time.monotonic() + 30
        while not frames or frames[-1][-1] < n_records:
            assert time.monotonic() < deadline, "the WAL-meta sender stalled"
            time.sleep(0.01)
        sent = [lsn for f in frames for lsn in f]
        assert sent == list(range(1, n_records + 1))            # every record once, in LSN order
        assert len(frames) < n_records and max(map(len, frames)) > 1   # batched per message
    finally:
        stop.set()
        snd.join(10)
        link.close()
        ro.close()
        primary.close()
    # a restart recovers exactly the acknowledged writes
    p2 = Primary(tmp_path, log=log, checkpoint_interval=0)
    try:
        assert dict(p2.scan(REL)) == written
    finally:
        p2.close()
        log.close()


from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis_profiles import scaled  # noqa: E402


@scaled(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 2600), min_size=1, max_size=60), rels=st.lists(st.sampled_from([REL, REL + 1]),
                                                                                      min_size=1, max_size=60))
def test_single_insert_path_matches_the_batch_path(tmp_path_factory, sizes, rels):
    """`insert` keeps the target page pinned from the fit check to the change (its own path); the
    same tuples through `insert_many` one at a time (the general path) give the same tids, the same
    pages and the same WAL."""
    a_dir, b_dir = tmp_path_factory.mktemp("fast"), tmp_path_factory.mktemp("model")
    fast = Primary(a_dir, checkpoint_interval=0)
    model = Primary(b_dir, checkpoint_interval=0)
    try:
        blocks: dict[int, int] = {}
        for k, size in enumerate(sizes):
            rel = rels[k % len(rels)]
            data = bytes([k % 251]) * size
            tid = fast.insert(rel, data)
            assert tid == model.insert_many(rel, [data])[0]
            blocks[rel] = max(blocks.get(rel, 0), tid[0] + 1)
        for rel, nb in blocks.items():
            for block in range(nb):
                tag = (1663, 5, rel, 0, block)
                assert fast.read_page(tag)[0] == model.read_page(tag)[0]
        assert fast.wal.read(1, 1 << 30) == model.wal.read(1, 1 << 30)
    finally:
        fast.close()
        model.close()


def test_page_lock_excludes_a_record_and_counts_the_wait():
    """MiniTransLocks.page_lock (the insert path's) waits for a mini-transaction on its page as page() does."""
    from logtide.replay.mini_trans import MiniTransLocks
    locks = MiniTransLocks()
    tag = (1663, 5, REL, 0, 3)
    order = []

    def page():
        with locks.page_lock(tag):
            order.append("page")

    def record():
        with locks.record([tag]):
            order.append("record")
    with locks.record([tag, (1663, 5, REL, 0, 4)]):
        t = threading.Thread(target=page)
        t.start()
        time.sleep(0.05)
        order.append("record done")
    t.join(10)
    assert order == ["record done", "page"] and locks.waits == 1
    with locks.page_lock(tag):       # and a mini-transaction waits for it
        t = threading.Thread(target=record)
        t.start()
        time.sleep(0.05)
        order.append("page done")
    t.join(10)
    assert order[2:] == ["page done", "record"] and locks.waits == 2
