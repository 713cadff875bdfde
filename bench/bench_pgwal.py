"""The PostgreSQL WAL reader against pg_waldump piped into a Python parse of its text, on the same segments;
and LogIndex bloom skip rates on the pgbench workload."""
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bench.ratios import Ratio

RATIOS = [
    Ratio("PgWalReader (Cython) vs pg_waldump | Python parse, same segments", "test_pgwal_reader",
          "test_pg_waldump_parse", 5.0, 3),
]

LINE = re.compile(r"rmgr: (\w+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+)/([0-9A-F]+)")
BLK = re.compile(r"blkref #(\d+): rel (\d+)/(\d+)/(\d+)(?: fork (\w+))? blk (\d+)")
FORKS = {"main": 0, "fsm": 1, "vm": 2, "init": 3}


@pytest.fixture(scope="module")
def pg_wal():
    from logtide.logindex.pgcluster import make_pgbench_wal, pg_available
    reason = pg_available()
    if reason:
        pytest.skip(reason)
    work = Path(tempfile.mkdtemp(prefix="bench-pg-", dir="/tmp"))
    try:
        yield make_pgbench_wal(work, scale=1, seconds=5)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _waldump_parse(wal_dir, first):
    """What a script would do without logtide: run pg_waldump and parse each line into the same tuples."""
    from logtide.logindex.pgcluster import PG_BIN
    p = subprocess.run([str(PG_BIN / "pg_waldump"), "-p", str(wal_dir), first], capture_output=True, text=True)
    out = []
    for line in p.stdout.splitlines():
        m = LINE.search(line)
        if m:
            tags = [(int(b[1]), int(b[2]), int(b[3]), FORKS[b[4] or "main"], int(b[5])) for b in BLK.findall(line)]
            out.append(((int(m.group(5), 16) << 32) | int(m.group(6), 16), tags, m.group(1), int(m.group(4))))
    return out


@pytest.mark.benchmark(group="pgwal")
def test_pg_waldump_parse(benchmark, items, pg_wal):
    from logtide.logindex.pgwal import PgWalReader
    first = PgWalReader(pg_wal).segments[0][1].name
    n = len(_waldump_parse(pg_wal, first))
    items(n)
    out = benchmark.pedantic(_waldump_parse, args=(pg_wal, first), rounds=3)
    assert len(out) == n


@pytest.mark.benchmark(group="pgwal")
def test_pgwal_reader(benchmark, items, pg_wal):
    from logtide.logindex.pgwal import PgWalReader
    n = len(PgWalReader(pg_wal).read_all())
    items(n)
    batch = benchmark(lambda: PgWalReader(pg_wal).read_all())
    assert len(batch) == n


@pytest.mark.benchmark(group="pgwal")
def test_logindex_pgbench_skip_rates(benchmark, items, pg_wal):
    """Lookups of every page of the pgbench WAL: bloom skip rates with full-size memtables and small ones."""
    from logtide import LogIndex
    from logtide.logindex.pgwal import PgWalReader
    batch = PgWalReader(pg_wal).read_all()
    pages = np.unique(batch.tags, axis=0)
    figures = {}
    work = Path(tempfile.mkdtemp(prefix="bench-pgli-"))
    try:
        for name, segs in (("4095 segments", 4095), ("256 segments", 256)):
            d = work / name.replace(" ", "_")
            li = LogIndex.open(d, max_segments=segs)
            li.insert_many(batch.tags, batch.lsn)
            li.flush(include_active=True)
            li.close()
            ro = LogIndex.open(d, mode="ro", table_cache=4096)
            ro.lsns_many(pages)
            st = ro.stats()
            figures[f"{name}: tables"] = st["saved_tables"]
            figures[f"{name}: bloom skip rate"] = round(st["bloom_skip_rate"], 4)
            figures[f"{name}: tables read per page"] = round(st["tables_read"] / max(1, st["lookups"]), 2)
            last = ro
        items(len(pages))
        benchmark(last.lsns_many, pages)
        benchmark.extra_info["figures"] = figures
        last.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
