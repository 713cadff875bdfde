"""Physical replication benchmarks.

- Redo: Cython (batch and per call) against `py_redo`, a straightforward Python implementation of
  the same record layout and heap redo (struct parsing, bytearray pages).
- RO apply throughput: the lazy startup worker (WAL meta -> LogIndex + OUTDATED marks) against the
  eager baseline (read every full record from the log and replay it) on the same stream.
- Replication lag (commit on the primary -> applied at the RO node) under a steady load, lazy and
  eager, with a plot of lag over time.
- Read latency at the RO node of a cold (not cached), hot (cached, current) and outdated page.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

RATIOS = [
    Ratio("redo apply_batch (Cython, GIL released) vs pure-Python redo", "test_redo_batch", "test_redo_python",
          10.0, 5),
    Ratio("redo per-call apply vs pure-Python redo", "test_redo_per_call", "test_redo_python", 3.0, 5),
    Ratio("RO apply throughput: lazy (index + mark OUTDATED) vs eager replay of the same stream",
          "test_ro_apply_lazy", "test_ro_apply_eager", 10.0, 5),
]

REL = (1663, 5, 16384)
NPAGES = 64


def _workload(n: int, seed: int = 3):
    """n heap records over 64 pages (60% insert, 25% update, some across pages, 15% delete)."""
    from logtide._ext import page as pg
    from logtide._ext import xlogwriter as xw
    rng = np.random.default_rng(seed)
    pages = [bytearray(8192) for _ in range(NPAGES)]
    live: list[tuple[int, int]] = []
    recs, entries = [], []  # entries: (page, record index, lsn)
    lsn = 0
    while len(recs) < n:
        r = rng.random()
        if r < 0.6 or not live:
            b = int(rng.integers(0, NPAGES))
            p = pages[b]
            init = pg.is_new(p)
            if init:
                pg.init(p)
            size = int(rng.integers(20, 120))
            if not pg.fits(p, size):
                pg.init(p)  # recycle the page: a fresh INIT_PAGE insert
                live = [t for t in live if t[0] != b]
                init = True
            off = pg.nslots(p) + 1
            tup = rng.bytes(size)
            rec = xw.heap_insert(REL + (0, b), off, tup, prev=lsn, init=init)
            lsn += 1
            pg.add(p, off, tup)
            pg.set_lsn(p, lsn)
            live.append((b, off))
            recs.append(rec)
            entries.append((b, len(recs) - 1, lsn))
        elif r < 0.85:
            i = int(rng.integers(0, len(live)))
            ob, ooff = live[i]
            nb = ob if rng.random() < 0.7 else int(rng.integers(0, NPAGES))
            size = int(rng.integers(20, 120))
            np_ = pages[nb]
            if pg.is_new(np_) or not pg.fits(np_, size):
                continue
            noff = pg.nslots(np_) + 1
            tup = rng.bytes(size)
            rec = xw.heap_update(REL + (0, nb), noff, tup, REL + (0, ob), ooff, prev=lsn)
            lsn += 1
            pg.kill(pages[ob], ooff)
            pg.add(np_, noff, tup)
            pg.set_lsn(pages[ob], lsn)
            pg.set_lsn(np_, lsn)
            live[i] = (nb, noff)
            recs.append(rec)
            entries.append((nb, len(recs) - 1, lsn))
            if nb != ob:
                entries.append((ob, len(recs) - 1, lsn))
        else:
            i = int(rng.integers(0, len(live)))
            b, off = live.pop(i)
            rec = xw.heap_delete(REL + (0, b), off, prev=lsn)
            lsn += 1
            pg.kill(pages[b], off)
            pg.set_lsn(pages[b], lsn)
            recs.append(rec)
            entries.append((b, len(recs) - 1, lsn))
    return recs, entries, pages


# ------------------------------------------------------------------ the pure-Python baseline
_HDR = struct.Struct("<IIQBB2xI")


def _py_decode(rec: bytes):
    tot_len, xid, prev, info, rmid, crc = _HDR.unpack_from(rec, 0)
    pos, datatotal, blocks, main_len, last = 24, 0, [], 0, None
    while tot_len - pos > datatotal:
        bid = rec[pos]
        if bid == 255:
            main_len = rec[pos + 1]
            pos += 2
            break
        if bid == 254:
            main_len = struct.unpack_from("<I", rec, pos + 1)[0]
            pos += 5
            break
        ff, dlen = struct.unpack_from("<BH", rec, pos + 1)
        pos += 4
        if ff & 0x80:
            rnode = last[0]
        else:
            rnode = struct.unpack_from("<III", rec, pos)
            pos += 12
        blk = struct.unpack_from("<I", rec, pos)[0]
        pos += 4
        last = (rnode, ff & 0x0F, blk, ff & 0xF0, dlen)
        blocks.append(last)
        datatotal += dlen
    out = []
    for rnode, fork, blk, flags, dlen in blocks:
        out.append((rnode + (fork, blk), flags, rec[pos:pos + dlen]))
        pos += dlen
    from logtide import crc32c
    if crc32c(rec[:20], crc32c(rec[24:])) != crc:
        raise ValueError("bad CRC")
    return rmid, info, out, rec[pos:pos + main_len]


def _py_add(p: bytearray, off: int, tup: bytes) -> None:
    lower, upper = struct.unpack_from("<HH", p, 12)
    n = (lower - 24) // 4
    alen = (len(tup) + 7) & ~7
    upper -= alen
    p[upper:upper + len(tup)] = tup
    struct.pack_into("<I", p, 24 + (off - 1) * 4, upper | (1 << 15) | (len(tup) << 17))
    if off == n + 1:
        lower += 4
    struct.pack_into("<HH", p, 12, lower, upper)


def _py_kill(p: bytearray, off: int) -> None:
    o = 24 + (off - 1) * 4
    iid = struct.unpack_from("<I", p, o)[0]
    struct.pack_into("<I", p, o, (iid & 0x7FFF) | (3 << 15) | (iid & 0xFFFE0000))


def py_redo(page: bytearray, tag: tuple, rec: bytes, lsn: int) -> int:
    rmid, info, blocks, main = _py_decode(rec)
    hi, lo = struct.unpack_from("<II", page, 0)
    if struct.unpack_from("<H", page, 14)[0] != 0 and lsn <= (hi << 32 | lo):
        return 0
    bid = next(i for i, b in enumerate(blocks) if b[0] == tag)
    _, flags, data = blocks[bid]
    if flags & 0x40:
        page[:] = bytes(8192)
        struct.pack_into("<HHHH", page, 12, 24, 8192, 8192, 8192 | 4)
    op = info & 0x70
    if op == 0x00:
        _py_add(page, struct.unpack_from("<H", main, 0)[0], data)
    elif op == 0x10:
        _py_kill(page, struct.unpack_from("<H", main, 4)[0])
    else:
        old_off, new_off = struct.unpack_from("<H", main, 4)[0], struct.unpack_from("<H", main, 12)[0]
        if bid == 0:
            if len(blocks) == 1:
                _py_kill(page, old_off)
            _py_add(page, new_off, data)
        else:
            _py_kill(page, old_off)
    struct.pack_into("<II", page, 0, lsn >> 32, lsn & 0xFFFFFFFF)
    return 1


@pytest.fixture(scope="module")
def redo_work():
    return _workload(scaled(50_000))


def _check(pages_out, want):
    for b in range(NPAGES):
        assert bytes(pages_out[b]) == bytes(want[b]), b


@pytest.mark.benchmark(group="redo")
def test_redo_batch(benchmark, items, redo_work):
    from logtide._ext import redo
    recs, entries, want = redo_work
    rows = np.array([e[0] for e in entries], dtype=np.int64)
    tags = np.array([REL + (0, e[0]) for e in entries], dtype=np.uint32)
    lens = np.array([len(r) for r in recs], dtype=np.int64)
    roff = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    blob = np.frombuffer(b"".join(recs), dtype=np.uint8)
    ri = np.array([e[1] for e in entries], dtype=np.int64)
    # per entry: its record's bytes, laid out in entry order
    eblob = np.concatenate([blob[roff[i]:roff[i + 1]] for i in ri])
    eoff = np.concatenate([[0], np.cumsum(lens[ri])]).astype(np.int64)
    lsns = np.array([e[2] for e in entries], dtype=np.uint64)
    items(len(entries))

    def run():
        pages = np.zeros((NPAGES, 8192), dtype=np.uint8)
        res, applied, bad = redo.apply_batch(pages, rows, tags, eblob, eoff, lsns)
        assert bad == -1
        return pages

    _check(benchmark(run), want)


@pytest.mark.benchmark(group="redo")
def test_redo_per_call(benchmark, items, redo_work):
    from logtide._ext import redo
    recs, entries, want = redo_work
    items(len(entries))
    tags = [REL + (0, b) for b in range(NPAGES)]

    def run():
        pages = [bytearray(8192) for _ in range(NPAGES)]
        apply = redo.apply
        for b, i, lsn in entries:
            apply(pages[b], tags[b], recs[i], lsn)
        return pages

    _check(benchmark(run), want)


@pytest.mark.benchmark(group="redo")
def test_redo_python(benchmark, items, redo_work):
    recs, entries, want = redo_work
    items(len(entries))
    tags = [REL + (0, b) for b in range(NPAGES)]

    def run():
        pages = [bytearray(8192) for _ in range(NPAGES)]
        for b, i, lsn in entries:
            py_redo(pages[b], tags[b], recs[i], lsn)
        return pages

    _check(benchmark(run), want)


# ------------------------------------------------------------------ RO apply: lazy (LogIndex) vs eager

NRELS = 8


def _fill_primary(primary, n: int, seed: int = 11):
    """n writes over 8 relations: 70% inserts, 30% updates of earlier tuples."""
    import random
    rng = random.Random(seed)
    tids = []
    for i in range(n):
        rel = 16384 + rng.randrange(NRELS)
        if tids and rng.random() < 0.3:
            j = rng.randrange(len(tids))
            r, tid = tids[j]
            tids[j] = (r, primary.update(r, tid, rng.randbytes(rng.randint(40, 200))))
        else:
            tids.append((rel, primary.insert(rel, rng.randbytes(rng.randint(40, 200)))))
    return tids


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A primary's WAL of scaled(20k) records and its WAL-meta stream as batch messages of 512."""
    from logtide._ext import xlogwriter as xw
    from logtide.engine.logservice import LogService
    from logtide.replay.meta_stream import encode_batch
    from logtide.replay.primary import Primary
    d = tmp_path_factory.mktemp("replay_stream")
    log = LogService.open(d / "log", fsync="never")
    primary = Primary(d, log=log, checkpoint_interval=0, pool_pages=4096)
    _fill_primary(primary, scaled(20_000))
    n = primary.write_lsn
    frames, lsn = [], 1
    while lsn <= n:
        recs = [(l, r) for l, r in primary.wal.read(lsn, 1 << 20)][:512]
        frames.append(encode_batch([l for l, _ in recs], [xw.wal_meta(r) for _, r in recs], n, 0))
        lsn = recs[-1][0] + 1
    yield d, log, n, frames
    primary.crash()
    log.close()


def _apply_all(mode, d, log, frames):
    from logtide.replay.meta_stream import decode_batch
    from logtide.replay.ro_node import ReadOnlyNode

    def setup():
        ro = ReadOnlyNode(d, log, node_id=9, mode=mode, background=False, pool_pages=8192,
                          feedback_interval=3600)
        ro.applied_lsn = ro.bg_lsn = 0
        return (ro,), {}

    def run(ro):
        for f in frames:
            ro.apply_batch(decode_batch(f))
        ro.close()
    return setup, run


@pytest.mark.benchmark(group="ro-apply")
def test_ro_apply_lazy(benchmark, items, stream):
    d, log, n, frames = stream
    items(n)
    setup, run = _apply_all("lazy", d, log, frames)
    benchmark.pedantic(run, setup=setup, rounds=5)


@pytest.mark.benchmark(group="ro-apply")
def test_ro_apply_eager(benchmark, items, stream):
    d, log, n, frames = stream
    items(n)
    setup, run = _apply_all("eager", d, log, frames)
    benchmark.pedantic(run, setup=setup, rounds=3)


# ------------------------------------------------------------------ replication lag under steady load
def _lag_run(tmp_path_factory, mode: str, seconds: float, rate: float):
    """A primary inserting at `rate`/s for `seconds`; every write's commit -> visible-at-RO delay."""
    import queue
    import threading
    import time
    from logtide.engine.logservice import LogService
    from logtide.replay.primary import Primary
    from logtide.replay.ro_node import ReadOnlyNode
    from logtide.replay.transport_inproc import connect_inprocess
    d = tmp_path_factory.mktemp(f"lag_{mode}")
    log = LogService.open(d / "log")
    primary = Primary(d, log=log, checkpoint_interval=0.2, pool_pages=4096)
    ro = ReadOnlyNode(d, log, node_id=1, mode=mode, pool_pages=8192, feedback_interval=0.2)
    link = connect_inprocess(primary, ro, heartbeat=0.005)
    pending: queue.Queue = queue.Queue()
    series = []
    t_start = time.perf_counter()

    def watch():
        while True:
            item = pending.get()
            if item is None:
                return
            lsn, t0 = item
            ro.wait_applied(lsn, timeout=30)
            series.append((t0 - t_start, time.perf_counter() - t0))

    w = threading.Thread(target=watch)
    w.start()
    import random
    rng = random.Random(1)
    n = 0
    batch = 50
    while time.perf_counter() - t_start < seconds:
        due = t_start + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        rel = 16384 + rng.randrange(NRELS)
        primary.insert_many(rel, [rng.randbytes(rng.randint(40, 200)) for _ in range(batch)])
        t_commit = time.perf_counter()
        for lsn in range(primary.write_lsn - batch + 1, primary.write_lsn + 1, 10):
            pending.put((lsn, t_commit))
        n += batch
    pending.put(None)
    w.join()
    link.close()
    ro.close()
    primary.close()
    log.close()
    return n, series


LAG_RATE = 20_000.0  # records per second, in group commits of 50


def _lag_figures(series):
    lags = np.array([l for _, l in series]) * 1e3
    return {"lag_p50_ms": float(np.percentile(lags, 50)), "lag_p99_ms": float(np.percentile(lags, 99)),
            "lag_max_ms": float(lags.max()), "samples": len(lags)}


@pytest.mark.benchmark(group="lag")
@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_replication_lag(benchmark, items, tmp_path_factory, mode):
    seconds = max(1.0, 6.0 * float(__import__("bench.conftest", fromlist=["SCALE"]).SCALE))
    out = {}

    def run():
        out["n"], out["series"] = _lag_run(tmp_path_factory, mode, seconds, rate=LAG_RATE)

    benchmark.pedantic(run, rounds=1, iterations=1)
    items(out["n"])
    benchmark.extra_info["figures"] = _lag_figures(out["series"])
    benchmark.extra_info["lag_series"] = [(round(t, 4), round(l * 1e3, 4)) for t, l in out["series"]]


# ------------------------------------------------------------------ read latency: cold, hot, outdated
@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    from logtide.engine.logservice import LogService
    from logtide.replay.primary import Primary
    from logtide.replay.ro_node import ReadOnlyNode
    from logtide.replay.transport_inproc import connect_inprocess
    d = tmp_path_factory.mktemp("read_latency")
    log = LogService.open(d / "log", fsync="never")
    primary = Primary(d, log=log, checkpoint_interval=0.05, pool_pages=4096)
    ro = ReadOnlyNode(d, log, node_id=1, pool_pages=4096, background=False, feedback_interval=0.05)
    link = connect_inprocess(primary, ro)
    tids = _fill_primary(primary, scaled(5_000))
    assert ro.wait_applied(primary.write_lsn)
    from logtide.replay.primary import rel_tag
    tags = sorted({rel_tag(r, t[0]) for r, t in tids})[:200]
    yield primary, ro, tags, tids
    link.close()
    ro.close()
    primary.close()
    log.close()


def _per_read(benchmark, n: int, kind: str) -> None:
    st = benchmark.stats.stats
    benchmark.extra_info["figures"] = {f"{kind}_read_us_median": round(st.median / n * 1e6, 2),
                                       f"{kind}_read_us_min": round(st.min / n * 1e6, 2)}


@pytest.mark.benchmark(group="read-latency")
def test_read_hot(benchmark, items, reader):
    primary, ro, tags, _ = reader
    for t in tags:
        ro.read_page(t)
    items(len(tags))
    benchmark(lambda: [ro.read_page(t) for t in tags])
    _per_read(benchmark, len(tags), "hot")


@pytest.mark.benchmark(group="read-latency")
def test_read_cold(benchmark, items, reader):
    """Not cached: read from the PageStore, then replay the page's LSNs from the LogIndex."""
    primary, ro, tags, _ = reader
    items(len(tags))

    def setup():
        for t in tags:
            ro.pool.evict(t)
        return (), {}

    benchmark.pedantic(lambda: [ro.read_page(t) for t in tags], setup=setup, rounds=10)
    _per_read(benchmark, len(tags), "cold")


@pytest.mark.benchmark(group="read-latency")
def test_read_outdated(benchmark, items, reader):
    """Cached but OUTDATED: one new record per page since the last read, replayed from the log."""
    primary, ro, tags, tids = reader
    items(len(tags))
    by_block = {}
    for r, tid in tids:
        by_block.setdefault((r, tid[0]), (r, tid))
    targets = [by_block[(t[2], t[4])] for t in tags if (t[2], t[4]) in by_block]

    def setup():
        for t in tags:
            ro.read_page(t)
        for k, (r, tid) in enumerate(targets):
            targets[k] = (r, primary.update(r, tid, b"u" * 40))
        assert ro.wait_applied(primary.write_lsn)
        return (), {}

    benchmark.pedantic(lambda: [ro.read_page(t) for t in tags], setup=setup, rounds=5)
    _per_read(benchmark, len(tags), "outdated")


def plot(benchmarks: dict, outdir) -> list:
    """Lag over time, lazy against eager replay."""
    from pathlib import Path
    runs = {name: b for name, b in benchmarks.items() if name.startswith("test_replication_lag")}
    if not runs:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, b in sorted(runs.items()):
        s = b.get("extra_info", {}).get("lag_series") or []
        if s:
            ax.plot([t for t, _ in s], [l for _, l in s], lw=0.8, label=name.split("[")[-1].rstrip("]"))
    ax.set_xlabel("time since start of load (s)")
    ax.set_ylabel("commit -> visible at RO (ms)")
    ax.set_title("Replication lag under steady primary load: lazy (LogIndex) vs eager replay")
    ax.legend()
    out = Path(outdir) / "replay_lag.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]
