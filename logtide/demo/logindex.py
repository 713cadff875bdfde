"""Demo stage: a LogIndex over a generated WAL-meta stream, and over real pgbench WAL when PostgreSQL is here."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

ORDER = 20
NAME = "logindex"
TITLE = "LogIndex: page -> LSN index (memtables, tables with 4KB blooms) over WAL meta and real PostgreSQL WAL"


def _check(li, tags, lsns, sample) -> int:
    """Mismatches between li.lsns() and a dict-of-lists built from the same rows, on sample tags."""
    want = {}
    sel = set(map(tuple, sample.tolist()))
    for t, l in zip(map(tuple, tags.tolist()), lsns.tolist()):
        if t in sel:
            lst = want.setdefault(t, [])
            if not lst or lst[-1] != l:
                lst.append(l)
    offsets, found = li.lsns_many(sample)
    bad = 0
    for i, t in enumerate(map(tuple, sample.tolist())):
        bad += found[offsets[i]:offsets[i + 1]].tolist() != want.get(t, [])
    return bad


def _generated(workdir: Path) -> bool:
    from logtide import LogIndex
    from logtide._ext.xlogreader import decode_many
    from logtide.logindex.walmeta_gen import wal_meta_stream, workload_tags

    n = 1_000_000
    tags = workload_tags(n, seed=3)
    buf, rec_lsns = wal_meta_stream(tags)
    t0 = time.perf_counter()
    batch = decode_many(buf, lsns=rec_lsns, meta=True)
    dec_s = time.perf_counter() - t0
    print(f"WAL meta: {n:,} records ({len(buf) / 1e6:.1f} MB) decoded in {dec_s:.3f}s = {n / dec_s / 1e6:.2f} M rec/s")
    li = LogIndex.open(workdir / "generated")
    t0 = time.perf_counter()
    step = 100_000
    for i in range(0, n, step):
        li.insert_many(batch.tags[i:i + step], batch.lsn[i:i + step])
        print(f"  inserted {min(n, i + step):,}/{n:,}", flush=True)
    li.flush(include_active=True)
    ins_s = time.perf_counter() - t0
    st = li.stats()
    print(f"insert + flush: {n / ins_s / 1e6:.2f} M entries/s, {st['tables_flushed']} tables in "
          f"{st['flushes']} commits")
    li.close()
    ro = LogIndex.open(workdir / "generated", mode="ro")
    rng = np.random.default_rng(5)
    cold = tags[tags[:, 2] != 16390]          # leave out the 10 hot pages (10% of all changes)
    q = cold[rng.integers(0, len(cold), 200_000)]
    t0 = time.perf_counter()
    offsets, found = ro.lsns_many(q)
    look_s = time.perf_counter() - t0
    st = ro.stats()
    print(f"lookups: {len(q) / look_s:,.0f} pages/s over {st['saved_tables']} tables ({len(found):,} LSNs); "
          f"tables read {st['tables_read']:,}, skipped by bloom {st['tables_skipped_bloom']:,} "
          f"-> bloom skip rate {st['bloom_skip_rate']:.3f}")
    bad = _check(ro, batch.tags, batch.lsn, q[:2000])
    walked = sum(len(a) for a, _ in ro.iter_lsn_arrays())
    print(f"verification: {bad} mismatches against a dict-of-lists on 2,000 pages; LSN walk saw {walked:,} of {n:,}")
    ro.close()
    return bad == 0 and walked == n


def _postgres(workdir: Path) -> bool:
    from logtide import LogIndex
    from logtide.logindex.pgcluster import make_pgbench_wal, pg_available
    from logtide.logindex.pgwal import PgWalReader, format_lsn

    reason = pg_available()
    if reason:
        print(f"PostgreSQL part skipped: {reason}")
        return True
    t0 = time.perf_counter()
    wal = make_pgbench_wal(workdir / "pg", scale=1, seconds=3)
    print(f"pgbench -i -s 1 and pgbench -T 3 in {time.perf_counter() - t0:.1f}s: "
          f"{len(list(wal.iterdir()))} WAL segment files")
    reader = PgWalReader(wal)
    t0 = time.perf_counter()
    batch = reader.read_all()
    rd_s = time.perf_counter() - t0
    print(f"WAL reader: {len(batch):,} records, {len(batch.lsn):,} block refs in {rd_s:.3f}s "
          f"({reader.segments_read * reader.seg_size / rd_s / 1e6:.0f} MB/s); ends at {format_lsn(reader.end_lsn)}: "
          f"{reader.end_reason}")
    li = LogIndex.open(workdir / "pgindex")
    li.insert_many(batch.tags, batch.lsn)
    li.flush(include_active=True)
    li.close()
    ro = LogIndex.open(workdir / "pgindex", mode="ro")
    pages = np.unique(batch.tags, axis=0)
    t0 = time.perf_counter()
    offsets, found = ro.lsns_many(pages)
    look_s = time.perf_counter() - t0
    st = ro.stats()
    print(f"pgbench LogIndex: {len(pages):,} pages, {st['saved_tables']} tables; lookups {len(pages) / look_s:,.0f} "
          f"pages/s; bloom skip rate {st['bloom_skip_rate']:.3f} (read {st['tables_read']:,}, "
          f"skipped {st['tables_skipped_bloom']:,})")
    bad = _check(ro, batch.tags, batch.lsn, pages[:: max(1, len(pages) // 2000)])
    print(f"verification: {bad} mismatches against a dict-of-lists built from the reader's rows")
    ro.close()
    return bad == 0 and len(batch.lsn) > 0


def run(workdir: Path) -> bool:
    ok = _generated(workdir)
    return _postgres(workdir) and ok
