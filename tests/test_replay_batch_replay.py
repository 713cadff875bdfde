"""Batch replay into a small buffer pool (crash recovery's path) equals per-record redo."""
import numpy as np
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide._ext import page as pg
from logtide._ext import redo, xlogwriter as xw
from logtide.replay.batch_replay import block_refs, replay_into_pool
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.page_store import PageStore

REL = (1663, 5, 16384, 0)


def _records(ops):
    """Inserts, and updates moving tuples between 10 pages, as the primary would log them."""
    pages = {b: bytearray(8192) for b in range(10)}
    live, recs = [], []
    for kind, b, size, pick in ops:
        if kind == "upd" and live:
            ob, off = live[pick % len(live)]
            p = pages[b]
            if pg.is_new(p) or not pg.fits(p, size):
                continue
            noff = pg.nslots(p) + 1
            recs.append(xw.heap_update(REL + (b,), noff, b"u" * size, REL + (ob,), off))
            pg.kill(pages[ob], off)
            pg.add(p, noff, b"u" * size)
            live[pick % len(live)] = (b, noff)
        else:
            p = pages[b]
            init = pg.is_new(p)
            if init:
                pg.init(p)
            if not pg.fits(p, size):
                continue
            off = pg.nslots(p) + 1
            recs.append(xw.heap_insert(REL + (b,), off, b"i" * size, init=init))
            pg.add(p, off, b"i" * size)
            live.append((b, off))
    return recs


@given(st.lists(st.tuples(st.sampled_from(["ins", "upd"]), st.integers(0, 9), st.integers(1, 900),
                          st.integers(0, 1000)), max_size=150), st.integers(2, 12))
@scaled(max_examples=20, deadline=None)
def test_batch_replay_equals_per_record_redo(tmp_path_factory, ops, frames):
    recs = _records(ops)
    lsns = np.arange(1, len(recs) + 1, dtype=np.uint64)
    offs = np.concatenate([[0], np.cumsum([len(r) for r in recs])]).astype(np.int64)
    blob = np.frombuffer(b"".join(recs), dtype=np.uint8)
    store = PageStore(tmp_path_factory.mktemp("bp"), writer=True)
    pool = BufferPool(frames, evict_dirty=lambda tag, page: store.write(tag, page) or True)
    tags, rec = block_refs(blob, offs)
    n = replay_into_pool(pool, store.read_into, blob, offs, lsns, tags, rec)
    assert n == len(tags)
    want = {b: bytearray(8192) for b in range(10)}
    for lsn, r in zip(lsns.tolist(), recs):
        for blk in redo.decode(r)["blocks"]:
            redo.apply(want[blk["tag"][4]], blk["tag"], r, lsn)
    for b in range(10):
        f = pool.lookup(REL + (b,))
        got = pool.frames[f].tobytes() if f >= 0 else bytes(store.read(REL + (b,)))
        w = bytearray(want[b])
        pg.set_checksum(w, b)
        g = bytearray(got)
        pg.set_checksum(g, b)
        assert g == w, b
    # again: everything is skipped by page LSN
    assert replay_into_pool(pool, store.read_into, blob, offs, lsns, tags, rec) == 0
    store.close()


spans: list[int] = []   # buffers per piece, over the examples: the multi-buffer case must occur


def teardown_module():
    assert not spans or max(spans) > 1, "no piece spanned two segments"


@given(st.lists(st.tuples(st.sampled_from(["ins", "upd"]), st.integers(0, 9), st.integers(1, 900),
                          st.integers(0, 1000)), max_size=150), st.integers(2, 12), st.integers(1, 6),
       st.sampled_from([4096, 16384, 1 << 20]))
@scaled(max_examples=20, deadline=None)
def test_page_by_page_redo_from_the_log_equals_per_record_redo(tmp_path_factory, ops, frames, runs, seg_size):
    """Recovery's path: block references read from a real log in `runs` pieces (WalLog.read_refs; a
    piece may span segments, so its records lie in several buffers),
    applied page by page (redo_pages) into a small pool that evicts to a page store: the pages equal
    per-record redo, each dirty frame's rec_lsn is the first LSN that changed it (as the LSN-order
    batch replay leaves it in a pool large enough for every page), and a second pass applies nothing."""
    from logtide.engine.logservice import LogService
    from logtide.replay.page_redo import redo_pages
    from logtide.replay.wal_log import WalLog
    recs = _records(ops)
    d = tmp_path_factory.mktemp("pr")
    log = LogService.open(d / "log", fsync="never", segment_size=seg_size)   # small: runs span segments
    wal = WalLog(log)
    for r in recs:
        wal.append(r)
    store = PageStore(d / "pages", writer=True)
    pool = BufferPool(frames, evict_dirty=lambda tag, page: store.write(tag, page) or True)
    big = BufferPool(16)
    step = max(1, sum(map(len, recs)) // runs)
    applied, lsn, pieces = 0, 1, []
    while recs and lsn <= len(recs):
        refs = wal.read_refs(lsn, step)
        pieces.append(refs)
        applied += redo_pages(pool, store.read_into, refs.bufs, refs.buf_id, refs.tags, refs.lsn, refs.rec_off, refs.rec_len)
        lsn = refs.next_lsn
    assert wal.read_refs(len(recs) + 1, step) is None
    assert applied == sum(len(p.tags) for p in pieces)
    spans.append(max((len(p.bufs) for p in pieces), default=0))
    assert not recs or max(p.max_xid for p in pieces) >= 0
    want = {b: bytearray(8192) for b in range(10)}
    for lsn, r in enumerate(recs, 1):
        for blk in redo.decode(r)["blocks"]:
            redo.apply(want[blk["tag"][4]], blk["tag"], r, lsn)
    for b in range(10):
        f = pool.lookup(REL + (b,))
        got = bytearray(pool.frames[f].tobytes() if f >= 0 else bytes(store.read(REL + (b,))))
        w = bytearray(want[b])
        pg.set_checksum(w, b)
        pg.set_checksum(got, b)
        assert got == w, b
    if recs:   # rec_lsn against the LSN-order batch replay, both in pools that hold every page
        page_pool = BufferPool(16)
        zero = lambda tag, frame: frame.__setitem__(slice(None), 0)  # noqa: E731
        for p in pieces:
            redo_pages(page_pool, zero, p.bufs, p.buf_id, p.tags, p.lsn, p.rec_off, p.rec_len)
        offs = np.concatenate([[0], np.cumsum([len(r) for r in recs])]).astype(np.int64)
        blob = np.frombuffer(b"".join(recs), dtype=np.uint8)
        tags, rec = block_refs(blob, offs)
        replay_into_pool(big, zero, blob, offs, np.arange(1, len(recs) + 1, dtype=np.uint64), tags, rec)
        assert {t: int(page_pool.rec_lsn[f]) for t, f in page_pool.dirty()} == \
            {t: int(big.rec_lsn[f]) for t, f in big.dirty()}
    for p in pieces:   # again: everything is skipped by page LSN
        assert redo_pages(pool, store.read_into, p.bufs, p.buf_id, p.tags, p.lsn, p.rec_off, p.rec_len) == 0
    store.close()
    log.close()


@scaled(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=4), min_size=1,
                max_size=40))
def test_first_applied_marks_each_records_first_reference_in_page_order(records):
    """first_applied against a model: for each record (its references consecutive, in LSN order),
    exactly its earliest reference in the page order is flagged."""
    from logtide.replay.page_redo import first_applied, page_order
    tags = np.array([(1663, 5, 16384 + r, 0, b) for refs in records for r, b in refs], np.uint32)
    lsns = np.array([k + 1 for k, refs in enumerate(records) for _ in refs], np.uint64)
    order, _starts = page_order(tags)
    got = first_applied(order, lsns)
    position = {int(i): p for p, i in enumerate(order)}
    want = np.zeros(len(order), np.uint8)
    i = 0
    for refs in records:
        want[min(position[j] for j in range(i, i + len(refs)))] = 1
        i += len(refs)
    assert got.tolist() == want.tolist()
