"""Restarts with small LogIndex memtables (many saved tables): an RO node that restarts uses the
primary's saved tables (RO mode) and re-indexes from the last saved LSN; a primary that crashes recovers from
its control file, page store and log. Every page is checked against a from-scratch WAL replay."""
import random

import pytest

from logtide.engine.logservice import LogService
from logtide._ext import page as pg
from logtide.replay.page_store import DW_FILE, PageStore
from logtide.replay.primary import PAGES_DIR, Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess
from logtide.replay.verify import ScratchModel
from logtide.replay.wal_log import WalLog

RELS = (16384, 16385)
SEG = 2


def _ops(primary, rng, n, tids):
    for _ in range(n):
        rel = rng.choice(RELS)
        mine = [t for t in tids if t[0] == rel]
        if mine and rng.random() < 0.4:
            i = tids.index(rng.choice(mine))
            tids[i] = (rel, primary.update(rel, tids[i][1], rng.randbytes(rng.randint(10, 500))))
        else:
            tids.append((rel, primary.insert(rel, rng.randbytes(rng.randint(10, 300)))))


def _check_all(ro, primary, log):
    assert ro.wait_applied(primary.write_lsn, timeout=60)
    model = ScratchModel(WalLog(log), primary.write_lsn)
    n = 0
    for rel in RELS:
        for b in range(primary.nblocks(rel)):
            page, lsn = ro.read_page(rel_tag(rel, b))
            assert model.same(rel_tag(rel, b), lsn, page), (rel, b, lsn)
            n += 1
    return n


@pytest.mark.timeout(120)
def test_ro_and_primary_restarts_with_saved_logindex_tables(tmp_path):
    log = LogService.open(tmp_path / "log")
    log.register_reader("verifier", 0)
    rng = random.Random(3)
    tids = []
    primary = Primary(tmp_path, log=log, pool_pages=256, checkpoint_interval=0.05, logindex_segments=SEG)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, pool_pages=8, feedback_interval=0.05, logindex_segments=SEG)
    link = connect_inprocess(primary, ro)
    try:
        _ops(primary, rng, 300, tids)
        assert _check_all(ro, primary, log) > 3
        link.close()
        ro.close()                      # the RO node goes away...
        _ops(primary, rng, 300, tids)   # ...the primary saves more LogIndex tables meanwhile
        primary.checkpoint()
        assert primary.index.stats()["saved_tables"] > 10
        ro = ReadOnlyNode(tmp_path, log, node_id=1, pool_pages=8, feedback_interval=0.05, logindex_segments=SEG)
        assert ro.index.replay_needed_from() > 0   # it starts from the primary's saved tables
        link = connect_inprocess(primary, ro)
        _ops(primary, rng, 100, tids)
        _check_all(ro, primary, log)
        # the primary crashes (buffers lost) and restarts from the control file, store and log; with
        # the RO node's link closed its apply LSN stays put, so the last writes cannot be flushed
        link.close()
        _ops(primary, rng, 50, tids)
        primary.crash()
        primary.index.close()
        primary = Primary(tmp_path, log=log, pool_pages=256, checkpoint_interval=0.05, logindex_segments=SEG)
        assert primary.recovered_records > 0
        for rel, tid in tids:
            assert primary.get(rel, tid) is not None
        link = connect_inprocess(primary, ro)   # the same RO node follows the restarted primary
        _ops(primary, rng, 100, tids)
        _check_all(ro, primary, log)
    finally:
        link.close()
        ro.close()
        primary.close()
        log.close()


def test_a_primary_dropped_unclosed_is_collected_and_its_directory_reopens(tmp_path):
    """Its checkpointer holds it only during a checkpoint: dropping the last reference closes it
    (writes durable, a checkpoint, the directory lock released), so the directory reopens here."""
    import threading
    import weakref
    from lifetime import collected, run_threads
    primary = Primary(tmp_path, pool_pages=256, checkpoint_interval=0.01)
    tids = {}
    lock = threading.Lock()

    def backend(k):
        for i in range(20):
            data = b"t%d-%d" % (k, i)
            tid = primary.insert(RELS[k % 2], data)
            with lock:
                tids[(RELS[k % 2], tid)] = data
    run_threads(8, backend)
    ref = weakref.ref(primary)
    del primary
    assert collected(ref), "the dropped primary stayed alive"
    with Primary(tmp_path, pool_pages=256) as again:
        assert {(rel, tid): again.get(rel, tid) for rel, tid in tids} == tids


@pytest.mark.timeout(120)
def test_a_flush_that_lost_its_in_place_write_is_redone_from_the_wal(tmp_path):
    """The page store's contract (docs/page_format.md): after a torn write a read returns the last
    complete write (or newer). Recovery and RO replay need no more: a flush that never completed
    did not move the consistent LSN, so the log is kept from the page's next change. Here a flush
    loses its whole in-place write (the page stays at its previous, intact version), the primary
    crashes, and the double-write copy is even thrown away: the restarted primary redoes the page
    from the WAL, and a new RO node that reads the old page from storage replays it up to date."""
    log = LogService.open(tmp_path / "log")
    rel = 16384
    p = Primary(tmp_path, log=log, pool_pages=64, checkpoint_interval=0, logindex_segments=SEG)
    try:
        first = [p.insert(rel, b"first-%03d" % i * 20) for i in range(300)]
        consistent = p.checkpoint()
        tag = rel_tag(rel, p.nblocks(rel) - 1)
        path = tmp_path / PAGES_DIR / ("%d_%d_%d_%d" % tag[:4])
        v1 = path.read_bytes()[tag[4] * 8192:(tag[4] + 1) * 8192]
        second = [p.insert(rel, b"second-%d" % i) for i in range(5)]
        assert all(t[0] == tag[4] for t in second)        # the same page, changed after the flush
        assert 0 < log.get_truncated_lsn() <= consistent == pg.get_lsn(v1) < p.write_lsn
        page, _ = p.read_page(tag)
        p.store.write_many([tag], [page])   # a flush: the double-write area, then in place...
        with open(path, "r+b") as f:        # ...whose in-place write was lost whole
            f.seek(tag[4] * 8192)
            f.write(v1)
        p.crash()
    except BaseException:
        p.crash()
        raise
    with PageStore(tmp_path / PAGES_DIR) as store:
        assert pg.get_lsn(store.read(tag)) == consistent          # readers get the last complete write
    (tmp_path / PAGES_DIR / DW_FILE).write_bytes(b"")              # no newer copy to fall back on
    want = [b"first-%03d" % i * 20 for i in range(300)] + [b"second-%d" % i for i in range(5)]
    p = Primary(tmp_path, log=log, pool_pages=64, checkpoint_interval=0, logindex_segments=SEG)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, pool_pages=8, feedback_interval=0.05, logindex_segments=SEG)
    link = connect_inprocess(p, ro)
    try:
        assert [p.get(rel, t) for t in first + second] == want
        with PageStore(tmp_path / PAGES_DIR) as store:
            assert pg.get_lsn(store.read(tag)) == consistent      # storage still has the old page
        assert ro.wait_applied(p.write_lsn, timeout=60)
        page, lsn = ro.read_page(tag)
        assert lsn == p.write_lsn and pg.get_lsn(page) == p.write_lsn
        assert [pg.get(page, t[1]) for t in second] == want[300:]
        mine, _ = p.read_page(tag)
        assert [pg.get(page, k) for k in range(1, pg.nslots(page) + 1)] == \
            [pg.get(mine, k) for k in range(1, pg.nslots(mine) + 1)]
    finally:
        link.close()
        ro.close()
        p.close()
        log.close()
