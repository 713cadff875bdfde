"""BufferPool, XlogBuffer and mini-transaction locks against simple models, and under threads."""
import threading
import time

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from hypothesis_profiles import scaled

from logtide._ext import page as pg
from logtide.replay.buffer_pool import DIRTY, OUTDATED, BufferPool, BufferPoolFullError
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_store import PageStore
from logtide.errors import WalGoneError
from logtide.replay.xlog_buffer import XlogBuffer

REL = (1663, 5, 16384, 0)


class PoolMachine(RuleBasedStateMachine):
    """A 4-frame pool over a real PageStore against a dict tag -> latest page bytes."""

    def __init__(self):
        super().__init__()
        import tempfile
        from pathlib import Path
        self.dir = tempfile.mkdtemp(prefix="ltbp")
        self.store = PageStore(Path(self.dir), writer=True)
        self.pool = BufferPool(4, evict_dirty=lambda tag, frame: self.store.write(tag, frame) or True)
        self.model = {}
        self.outdated = set()
        self.lsn = 0

    def _load(self, tag, frame):
        self.store.read_into(tag, frame)

    @rule(b=st.integers(0, 9), data=st.binary(min_size=1, max_size=64))
    def modify(self, b, data):
        tag = REL + (b,)
        f, _ = self.pool.pin(tag, self._load)
        page = self.pool.frames[f]
        if pg.is_new(page):
            pg.init(page)
        if pg.fits(page, len(data)):
            pg.add(page, pg.nslots(page) + 1, data)
        self.lsn += 1
        pg.set_lsn(page, self.lsn)
        self.pool.mark_dirty(f)
        self.pool.unpin(f)
        self.model[tag] = bytes(page)

    @rule(b=st.integers(0, 9))
    def mark_outdated(self, b):
        tag = REL + (b,)
        assert self.pool.mark_outdated(tag) == (tag in self.pool)
        if tag in self.pool:
            self.outdated.add(tag)

    @rule(b=st.integers(0, 9))
    def evict(self, b):
        tag = REL + (b,)
        f = self.pool.lookup(tag)
        dirty = f >= 0 and self.pool.state[f] & DIRTY
        assert self.pool.evict(tag) == (f >= 0 and not dirty)
        if f >= 0 and not dirty:
            self.outdated.discard(tag)

    @rule()
    def flush(self):
        for tag, f in self.pool.dirty():
            self.store.write(tag, self.pool.frames[f])
            self.pool.clear_dirty(f)

    @invariant()
    def agrees(self):
        assert len(self.pool) <= 4
        for tag, want in self.model.items():
            f = self.pool.lookup(tag)
            if f >= 0:
                got = self.pool.frames[f].tobytes()
                assert bool(self.pool.state[f] & OUTDATED) == (tag in self.outdated)
            else:
                got = bytes(self.store.read(tag))
                got = got[:8] + want[8:10] + got[10:]  # the store stamped a checksum
                self.outdated.discard(tag)
            assert got == want

    def teardown(self):
        self.store.close()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = scaled(max_examples=40, stateful_step_count=40, deadline=None)


def test_all_pinned_is_a_typed_error():
    pool = BufferPool(2)
    pool.pin_wait_s = 0.1
    load = lambda tag, frame: None
    pool.pin(REL + (1,), load)
    pool.pin(REL + (2,), load)
    with pytest.raises(BufferPoolFullError):
        pool.pin(REL + (3,), load)
    pool.unpin(0)
    f, hit = pool.pin(REL + (3,), load)
    assert not hit and len(pool) == 2


def test_pool_threads_never_duplicate_or_lose_pages(tmp_path):
    """8 threads pin, append to and unpin 12 pages through a 5-frame pool; counts must add up."""
    store = PageStore(tmp_path, writer=True)
    pool = BufferPool(5, evict_dirty=lambda tag, frame: store.write(tag, frame) or True)
    locks = MiniTransLocks()
    adds = [0] * 12

    def load(tag, frame):
        store.read_into(tag, frame)

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(120):
            b = int(rng.integers(0, 12))
            tag = REL + (b,)
            with locks.page(tag):
                f, _ = pool.pin(tag, load)
                page = pool.frames[f]
                if pg.is_new(page):
                    pg.init(page)
                if pg.fits(page, 4):
                    pg.add(page, pg.nslots(page) + 1, b"abcd")
                    adds[b] += 1
                pool.mark_dirty(f)
                pool.unpin(f)

    ts = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len(set(pool.table.values())) == len(pool.table)
    for b in range(12):
        tag = REL + (b,)
        f = pool.lookup(tag)
        page = pool.frames[f] if f >= 0 else store.read(tag)
        assert pg.nslots(page) == adds[b]
    store.close()


def test_xlog_buffer_lru_hits_and_readahead():
    log = {l: bytes([l % 256]) * (100 + l) for l in range(1, 200)}
    calls = []

    def fetch(first, max_bytes):
        calls.append(first)
        out, size = [], 0
        for l in range(first, 200):
            if l not in log or (out and size + len(log[l]) > max_bytes):
                break
            out.append((l, log[l]))
            size += len(log[l])
        return out

    xb = XlogBuffer(fetch, capacity_bytes=5000, readahead_bytes=1000)
    assert xb.get(10) == log[10]
    assert xb.misses == 1 and xb.reads == 1
    assert xb.get(11) == log[11] and xb.get(12) == log[12]
    assert xb.hits == 2 and xb.reads == 1  # read ahead
    for l in range(1, 199):
        assert xb.get(l) == log[l]
    assert xb.nbytes <= 5000
    buf, offs = xb.get_many([5, 6, 198])
    assert buf[offs[2]:offs[3]].tobytes() == log[198]
    xb.drop_below(150)
    assert min(xb._lru) >= 150
    del log[3]
    with pytest.raises(WalGoneError):
        XlogBuffer(fetch).get(3)


def test_mini_transaction_blocks_page_readers_until_all_pages_indexed():
    locks = MiniTransLocks()
    a, b = REL + (0,), REL + (1,)
    lists = {a: [10], b: [10]}
    seen = []
    held = locks.acquire_many([a, b])
    lists[a].append(11)  # page 0 indexed, page 1 not yet

    def reader(tag):
        with locks.page(tag):
            seen.append((tag, lists[tag][-1]))

    ts = [threading.Thread(target=reader, args=(t,)) for t in (a, b)]
    [t.start() for t in ts]
    time.sleep(0.2)
    assert seen == []  # both readers wait for the mini-transaction
    lists[b].append(11)
    locks.release_many(held)
    [t.join() for t in ts]
    assert sorted(seen) == [(a, 11), (b, 11)]
    assert locks.waits >= 2


@given(st.lists(st.tuples(st.sampled_from([1663, 1664]), st.sampled_from([5, 6]), st.integers(0, 2**32 - 1),
                          st.sampled_from([0, 1]), st.integers(0, 2**32 - 1)), max_size=60), st.booleans())
@scaled(max_examples=150, deadline=None)
def test_batch_dedupe_and_stripes_match_per_tag(tags, same):
    """The startup worker's array forms (distinct pages, lock stripes) agree with the per-tag forms."""
    from logtide.replay.ro_node import _unique_tags
    if same:
        tags = [(1663, 5, t[2] % 4, 0, t[4] % 50) for t in tags]
    arr = np.array(tags, dtype=np.uint32).reshape(-1, 5)
    uniq = _unique_tags(arr)
    assert sorted(map(tuple, uniq.tolist())) == sorted(set(map(tuple, arr.tolist())))
    locks = MiniTransLocks()
    assert locks.stripes_of(arr) == locks.stripes_of([tuple(t) for t in tags])
    for t in tags[:5]:
        assert locks._stripe(t) in locks.stripes_of(arr)
