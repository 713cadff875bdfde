"""A randomized primary workload written as a `logtide.replay` directory, for the Spark replay's
tests, benchmark and demo.

Transactions of heap inserts, updates (a move to another page is one record on two pages), deletes
and full-page images, skewed so that some pages take many updates, are appended to a real log
service (several segments). Optionally the pages as of a checkpoint LSN go to a real PageStore with
the control file, as a primary's checkpoint leaves them. The generator keeps its own pages by
applying each record with the Cython redo, so `pages` is the expected state at the end.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field


from logtide._ext import page as pg
from logtide._ext import redo
from logtide._ext import xlogwriter as xw

SPC, DB = 1663, 5


@dataclass
class Workload:
    data_dir: str
    last_lsn: int = 0
    checkpoint_lsn: int = 0
    xids: dict = field(default_factory=dict)         # lsn -> xid
    pages: dict = field(default_factory=dict)        # tag -> bytearray, at last_lsn

    def mid_transaction_lsn(self) -> int:
        """An LSN inside a transaction: its record and the next one share an xid."""
        lsns = sorted(self.xids)
        for a, b in zip(lsns[len(lsns) // 2:], lsns[len(lsns) // 2 + 1:]):
            if self.xids[a] == self.xids[b]:
                return a
        raise ValueError("no multi-record transaction")


def write_workload(data_dir, records: int, *, seed: int = 1, rels=(16384, 16385, 16386), blocks_per_rel: int = 40,
                   checkpoint_at: int | None = None, segment_size: int = 1 << 20, fpi_rate: float = 0.04,
                   progress=None) -> Workload:
    """Append about `records` WAL records to data_dir/log; return the Workload."""
    from logtide.engine.logservice import LogService
    from logtide.replay.control_file import Control, write_control
    from logtide.replay.page_store import PageStore
    rng = random.Random(seed)
    data_dir = os.fspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    log = LogService.open(os.path.join(data_dir, "log"), fsync="never", segment_size=segment_size)
    w = Workload(data_dir)
    pages = w.pages
    live: dict[tuple, list[int]] = {}
    by_rel: dict[int, list[tuple]] = {r: [] for r in rels}     # pages of each relation, in creation order
    nblocks = {r: 0 for r in rels}
    lsn = log.get_latest_lsn()
    xid = 100
    pending: list[bytes] = []

    def emit(rec: bytes, tags) -> None:
        nonlocal lsn
        lsn += 1
        for t in tags:
            p = pages.get(t)
            if p is None:
                p = pages[t] = bytearray(8192)
                by_rel[t[2]].append(t)
            redo.apply(p, t, rec, lsn)
        pending.append(rec)
        w.xids[lsn] = xid

    def pick_page(rel: int) -> tuple:
        # skewed: a few hot blocks take most changes
        hot = rng.random() < 0.5 and nblocks[rel] > 0
        b = rng.randrange(min(3, nblocks[rel])) if hot else rng.randrange(nblocks[rel] + 1)
        return (SPC, DB, rel, 0, min(b, blocks_per_rel - 1))

    def insert(rel: int) -> None:
        tup = rng.randbytes(rng.randint(20, 300))
        t = pick_page(rel)
        page = pages.get(t)
        init = page is None or pg.is_new(page)
        if not init and not pg.fits(page, len(tup)):
            return
        off = 1 if init else pg.nslots(page) + 1
        emit(xw.heap_insert(t, off, tup, xid=xid, prev=lsn, init=init), [t])
        live.setdefault(t, []).append(off)
        nblocks[rel] = max(nblocks[rel], t[4] + 1)

    def some_live(rel: int):
        """A page of rel with live tuples (a few random tries), or None."""
        cands = by_rel[rel]
        for _ in range(4):
            if not cands:
                return None
            t = cands[rng.randrange(len(cands))]
            if live.get(t):
                return t
        return None

    def update(rel: int) -> None:
        ot = some_live(rel)
        if ot is None:
            return insert(rel)
        ooff = rng.choice(live[ot])
        tup = rng.randbytes(rng.randint(20, 200))
        nt = ot if rng.random() < 0.5 else pick_page(rel)
        page = pages.get(nt)
        init = nt != ot and (page is None or pg.is_new(page))
        if not init and not pg.fits(page, len(tup)):
            return
        noff = 1 if init else pg.nslots(page) + 1
        emit(xw.heap_update(nt, noff, tup, ot, ooff, xid=xid, prev=lsn, init=init), [nt] if nt == ot else [nt, ot])
        live[ot].remove(ooff)
        live.setdefault(nt, []).append(noff)
        nblocks[rel] = max(nblocks[rel], nt[4] + 1)

    def delete(rel: int) -> None:
        t = some_live(rel)
        if t is None:
            return
        off = live[t].pop(rng.randrange(len(live[t])))
        emit(xw.heap_delete(t, off, xid=xid, prev=lsn), [t])

    def fpi(rel: int) -> None:
        have = by_rel[rel]
        if not have:
            return
        tags = list({have[rng.randrange(len(have))] for _ in range(rng.randint(1, 3))})
        tags = [t for t in tags if not pg.is_new(pages[t])]
        if not tags:
            return
        emit(xw.full_page_images(tags, [bytes(pages[t]) for t in tags], xid=xid, prev=lsn), tags)

    def flush() -> None:
        if pending:
            first = log.append_many(pending)
            assert first == lsn - len(pending) + 1, (first, lsn, len(pending))
            pending.clear()

    start = lsn
    while lsn - start < records:
        xid += 1
        rel = rng.choice(rels)
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < fpi_rate:
                fpi(rel)
            elif r < 0.55:
                insert(rel)
            elif r < 0.85:
                update(rel)
            else:
                delete(rel)
        if len(pending) >= 256:
            flush()
        if checkpoint_at is not None and not w.checkpoint_lsn and lsn >= checkpoint_at:
            flush()
            store = PageStore(os.path.join(data_dir, "pages"), writer=True)
            tags = sorted(pages)
            store.write_many(tags, [pages[t] for t in tags])
            store.close()
            write_control(data_dir, Control(lsn, xid + 1))
            w.checkpoint_lsn = lsn
        if progress is not None and len(pending) == 0:
            progress(lsn - start)
    flush()
    w.last_lsn = lsn
    log.close()
    return w


def expected_pages(w: Workload) -> dict:
    """The generator's pages at its last LSN, checksums stamped (as a page store holds them)."""
    out = {}
    for t, p in w.pages.items():
        b = bytearray(p)
        pg.set_checksum(b, t[4])
        out[t] = bytes(b)
    return out

