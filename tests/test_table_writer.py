"""The LogIndex table writer (C, without the GIL) against the format written the plain way, and the
durable file replacement under it."""
import errno
import os

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import Bloom4K, crc32c
from logtide._ext.durable_io import replace_file_durably
from logtide._ext.memtable import Memtable
from logtide._ext.table_writer import write_tables
from logtide.logindex.table_format import BLOOM_BLOCK, TABLE_HEADER, TABLE_MAGIC


def _reference_slot(m: Memtable) -> bytes:
    image = m.to_bytes()
    head = TABLE_HEADER.pack(TABLE_MAGIC, len(image), m.table_id)
    return head + image + crc32c(image, crc32c(head)).to_bytes(4, "little")


def _reference_bloom(m: Memtable, expected: int) -> bytes:
    b = Bloom4K(table_id=m.table_id, min_lsn=m.min_lsn, max_lsn=m.max_lsn, expected_elements=expected)
    b.add_many(m.tags())
    return b.to_bytes()


@scaled(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tables=st.integers(1, 6), rows=st.integers(0, 3000),
       expected=st.sampled_from([819, 4095]))
def test_written_slots_and_blooms_match_the_reference(tmp_path_factory, seed, tables, rows, expected):
    rng = np.random.default_rng(seed)
    d = tmp_path_factory.mktemp("tw")
    mts, lsn = [], 1 << 32
    for t in range(tables):
        m = Memtable(table_id=100 + t)
        tags = rng.integers(0, 50, (rows, 5)).astype(np.uint32)
        lsns = lsn + np.sort(rng.integers(0, 4 * rows + 1, rows)).astype(np.uint64)
        m.insert_many(tags, lsns)
        lsn = int(lsns[-1]) if rows else lsn
        mts.append(m)
    tfd = os.open(d / "t", os.O_RDWR | os.O_CREAT, 0o644)
    bfd = os.open(d / "b", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        slot = 300_000
        places = np.array([(tfd, i * slot, bfd, i * BLOOM_BLOCK) for i in range(tables)], np.int64)
        blooms = write_tables(mts, places, expected, np.array([tfd, bfd], np.int64), d)
        for i, m in enumerate(mts):
            want = _reference_slot(m)
            assert os.pread(tfd, len(want), i * slot) == want
            bwant = _reference_bloom(m, expected)
            assert os.pread(bfd, BLOOM_BLOCK, i * BLOOM_BLOCK) == bwant
            assert blooms[i].to_bytes() == bwant
            assert (blooms[i].table_id, blooms[i].min_lsn, blooms[i].max_lsn) == (m.table_id, m.min_lsn, m.max_lsn)
    finally:
        os.close(tfd)
        os.close(bfd)


def test_a_failed_write_raises_oserror(tmp_path):
    m = Memtable(table_id=7)
    m.insert((1, 2, 3, 4, 5), 9)
    ro = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as e:
            write_tables([m], np.array([(ro, 0, ro, 0)], np.int64), 819, np.array([], np.int64))
        assert e.value.errno == errno.EBADF and "LogIndex" in str(e.value)
    finally:
        os.close(ro)
    with pytest.raises(ValueError):
        write_tables([m], np.zeros((2, 4), np.int64), 819, np.array([], np.int64))
    with pytest.raises(TypeError):
        write_tables([object()], np.zeros((1, 4), np.int64), 819, np.array([], np.int64))


def test_replace_file_durably(tmp_path):
    path = tmp_path / "meta"
    replace_file_durably(tmp_path / "meta.tmp", path, b"first")
    replace_file_durably(tmp_path / "meta.tmp", path, b"second, longer")
    assert path.read_bytes() == b"second, longer"
    assert not (tmp_path / "meta.tmp").exists()
    replace_file_durably(tmp_path / "meta.tmp", path, b"")
    assert path.read_bytes() == b""
    with pytest.raises(OSError) as e:
        replace_file_durably(tmp_path / "no" / "x.tmp", tmp_path / "no" / "x", b"data")
    assert e.value.errno == errno.ENOENT
    assert path.read_bytes() == b""       # a failed replacement leaves the old file
