"""The PostgreSQL WAL reader against pg_waldump on the WAL of a real pgbench run."""
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from logtide import LogIndex
from logtide.errors import CorruptRecordError, CorruptWalPageError
from logtide.logindex.pgcluster import PG_BIN, make_pgbench_wal, pg_available
from logtide.logindex.pgwal import PgWalReader, build_index, format_lsn, parse_lsn
from waldump_end import waldump_end_lsn

REASON = pg_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))

FORKS = {"main": 0, "fsm": 1, "vm": 2, "init": 3}
LINE = re.compile(r"rmgr: (\w+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+/[0-9A-F]+)")
BLK = re.compile(r"blkref #(\d+): rel (\d+)/(\d+)/(\d+)(?: fork (\w+))? blk (\d+)")


def waldump(wal_dir: Path, first: str):
    """pg_waldump's records as {lsn: (tot_len, xid, [(spc, db, rel, fork, blk)...])}."""
    p = subprocess.run([str(PG_BIN / "pg_waldump"), "-p", str(wal_dir), first], capture_output=True, text=True,
                       timeout=120)
    out = {}
    for line in p.stdout.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        tags = [(int(b[1]), int(b[2]), int(b[3]), FORKS[b[4] or "main"], int(b[5])) for b in BLK.findall(line)]
        out[parse_lsn(m.group(5))] = (int(m.group(3)), int(m.group(4)), tags)
    return out, p.stderr


@pytest.fixture(scope="module")
def pg_wal():
    work = Path(tempfile.mkdtemp(prefix="logtide-pg-", dir="/tmp"))
    try:
        yield make_pgbench_wal(work, scale=1, seconds=3)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.timeout(180)
def test_reader_matches_pg_waldump(pg_wal):
    reader = PgWalReader(pg_wal)
    batch = reader.read_all()
    first = reader.segments[0][1].name
    dumped, err = waldump(pg_wal, first)
    assert len(dumped) > 10_000, err
    # the same records, at the same LSNs, with the same lengths and xids
    ours = {int(l): i for i, l in enumerate(batch.rec_lsn.tolist())}
    assert set(ours) == set(dumped)
    n_refs = 0
    rows = {(int(l), tuple(t)) for l, t in zip(batch.lsn.tolist(), batch.tags.tolist())}
    for lsn, (tot_len, xid, tags) in dumped.items():
        i = ours[lsn]
        assert (int(batch.rec_tot_len[i]), int(batch.rec_xid[i])) == (tot_len, xid), format_lsn(lsn)
        first_row, nb = int(batch.rec_first[i]), int(batch.rec_nblocks[i])
        assert [tuple(t) for t in batch.tags[first_row:first_row + nb].tolist()] == tags, format_lsn(lsn)
        for t in tags:  # every blkref of pg_waldump: same LSN, rel and block
            assert (lsn, t) in rows
        n_refs += len(tags)
    assert n_refs == len(batch.lsn) > 10_000
    # records continued across pages were there (and decoded)
    starts = batch.rec_lsn % 8192
    assert int(((starts + batch.rec_tot_len) > 8192).sum()) > 100
    # pg_waldump and we agree on where the WAL ends
    end = waldump_end_lsn(err, reader.seg_size)
    assert end is not None and reader.end_lsn == end, (err, format_lsn(reader.end_lsn), reader.end_reason)
    assert "zero record length" in reader.end_reason
    # the per-record iterator yields the documented tuples
    lsn, tags, rmid, info, xid = next(iter(reader))
    assert lsn == min(dumped) and [tuple(t) for t in tags] == dumped[lsn][2]


@pytest.mark.timeout(180)
def test_logindex_of_pgbench_wal(pg_wal, tmp_path):
    li = LogIndex.open(tmp_path / "idx", max_segments=512)   # small memtables: many tables
    reader = build_index(pg_wal, li)
    li.flush(include_active=True)
    batch = reader.read_all()
    # every page's LSN list equals a direct grouping of the reader's rows
    tags, inverse = np.unique(batch.tags, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    li.close()
    li = LogIndex.open(tmp_path / "idx", mode="ro")   # served from the table files now
    offsets, found = li.lsns_many(tags)
    for i in range(0, len(tags), max(1, len(tags) // 300)):
        want = np.unique(batch.lsn[inverse == i])
        assert np.array_equal(found[offsets[i]:offsets[i + 1]], want)
    st = li.stats()
    assert st["tables_read"] > 0 and st["saved_tables"] >= 5
    assert st["tables_skipped_bloom"] > 0
    # an incremental-backup query: pages changed between two LSNs
    lo, hi = int(batch.lsn[len(batch.lsn) // 3]), int(batch.lsn[2 * len(batch.lsn) // 3])
    changed = {tuple(t) for l, t in li.iter_lsn(lo) if l <= hi}
    sel = (batch.lsn >= lo) & (batch.lsn <= hi)
    assert changed == set(map(tuple, batch.tags[sel].tolist()))
    li.close()


def _copy(pg_wal, tmp_path):
    d = tmp_path / "wal"
    shutil.copytree(pg_wal, d)
    return d


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x04
    path.write_bytes(bytes(data))


@pytest.mark.timeout(180)
def test_corrupt_record_in_pg_wal(pg_wal, tmp_path):
    d = _copy(pg_wal, tmp_path)
    good = PgWalReader(pg_wal).read_all()
    segno, path = PgWalReader(d).segments[0]
    base = segno * PgWalReader(d).seg_size
    # a record in the middle of the first segment
    k = len(good.rec_lsn) // 2
    lsn = int(good.rec_lsn[k])
    _flip(path, lsn - base + 30)
    with pytest.raises(CorruptRecordError):
        PgWalReader(d, strict=True).read_all()
    r = PgWalReader(d)
    b = r.read_all()
    # without strict the WAL ends at the damaged record, as in PostgreSQL recovery; nothing after it
    assert r.end_lsn == lsn and "invalid record" in r.end_reason
    assert np.array_equal(b.rec_lsn, good.rec_lsn[:k])
    assert np.array_equal(b.tags, good.tags[:int(good.rec_first[k])])


@pytest.mark.timeout(180)
def test_corrupt_page_header_and_short_segment(pg_wal, tmp_path):
    d = _copy(pg_wal, tmp_path)
    segno, path = PgWalReader(d).segments[0]
    _flip(path, 8192 * 5)  # the magic of page 5
    with pytest.raises(CorruptWalPageError):
        PgWalReader(d, strict=True).read_all()
    r = PgWalReader(d)
    b = r.read_all()
    assert r.end_reason.startswith("invalid page header") and int(b.rec_lsn[-1]) < segno * r.seg_size + 8192 * 5
    data = path.read_bytes()
    path.write_bytes(data[:100_000])
    with pytest.raises(CorruptWalPageError, match="bytes"):
        PgWalReader(d).read_all()


def test_lsn_text_forms():
    assert parse_lsn("0/2001108") == 0x2001108 and format_lsn(0x1_0000_0010) == "1/00000010"
    with pytest.raises(ValueError):
        parse_lsn("zz/1")
