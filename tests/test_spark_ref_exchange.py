"""The pages plan's exchange files (spark/ref_exchange.py) and the byte-balanced split of the
segments among its scan tasks, without Spark."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.spark.errors import ReplayInputError
from logtide.spark.page_owner import owners
from logtide.spark.ref_exchange import gather_refs, read_refs, refs_path, write_refs


def _rows(n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    tags = rng.integers(0, 50, (n, 5)).astype(np.uint32)
    return (tags, np.arange(1, n + 1, dtype=np.uint64), rng.integers(0, 9, n).astype(np.int32),
            rng.integers(0, 1 << 40, n).astype(np.int64), rng.integers(30, 9000, n).astype(np.int32))


@pytest.mark.parametrize("partitions", [1, 2, 7])
def test_every_row_reaches_its_owner_once_in_order(tmp_path, partitions):
    tasks = [_rows(500, 1), _rows(0, 2), _rows(1234, 3)]
    counts = {p: {} for p in range(partitions)}
    for t, rows in enumerate(tasks):
        c = write_refs(str(tmp_path), t, rows, partitions)
        assert c.sum() == len(rows[1])
        for p in range(partitions):
            counts[p][t] = int(c[p])
    for p in range(partitions):
        got = read_refs(str(tmp_path), p, counts[p])
        for t, cols in enumerate(got):
            mine = owners(tasks[t][0], partitions) == p
            for a, b in zip(cols, tasks[t]):
                assert np.array_equal(a, b[mine])        # the task's order (LSN order) is kept
                assert a.dtype == b.dtype


def test_a_short_or_missing_file_is_a_typed_error(tmp_path):
    rows = _rows(100, 4)
    c = write_refs(str(tmp_path), 0, rows, 2)
    with pytest.raises(ReplayInputError, match="reported"):
        read_refs(str(tmp_path), 1, {0: int(c[1]) + 1})
    with pytest.raises(ReplayInputError, match="cannot be read"):
        read_refs(str(tmp_path), 1, {0: int(c[1]), 1: 0})
    with open(refs_path(str(tmp_path), 0, 0), "r+b") as f:
        f.truncate(100)
    with pytest.raises(ReplayInputError, match="cannot be read"):
        read_refs(str(tmp_path), 0, {0: int(c[0])})


@scaled(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 12))
def test_balanced_ranges_cover_everything_contiguously(sizes, tasks):
    from logtide.spark.replay_job import balanced_ranges
    r = balanced_ranges(sizes, tasks)
    assert len(r) == min(tasks, len(sizes))
    assert r[0][0] == 0 and r[-1][1] == len(sizes)
    assert all(a < z for a, z in r) and all(r[i][1] == r[i + 1][0] for i in range(len(r) - 1))


def test_balanced_ranges_split_equal_segments_evenly():
    from logtide.spark.replay_job import balanced_ranges
    assert balanced_ranges([8] * 618 + [1], 2) == [(0, 309), (309, 619)]
    assert balanced_ranges([100, 1, 1, 1, 1, 100], 2) == [(0, 3), (3, 6)]
    assert balanced_ranges([5, 5, 5], 7) == [(0, 1), (1, 2), (2, 3)]


def _mine(rows, part, partitions):
    m = owners(rows[0], partitions) == part
    return tuple(a[m] for a in rows)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert np.array_equal(a, b) and a.dtype == b.dtype


def test_gather_takes_peer_files_and_scans_a_missing_peer_itself(tmp_path):
    """Task 1 of 3 ranges: range 0's file is there, range 2's never appears, so task 1 scans range
    2 itself after the wait, and only range 2."""
    ranges = [_rows(300, 5), _rows(400, 6), _rows(250, 7)]
    write_refs(str(tmp_path), 0, ranges[0], 3)
    scanned = []

    def scan(t):
        scanned.append(t)
        return ranges[t]
    got = gather_refs(str(tmp_path), 1, 3, 3, scan, wait_s=0.05)
    assert scanned == [2]
    _same(got, [_mine(ranges[0], 1, 3), _mine(ranges[2], 1, 3)])


def test_gather_waits_for_a_peer_file_that_appears_later(tmp_path):
    import threading
    rows = _rows(500, 8)
    t = threading.Timer(0.2, lambda: write_refs(str(tmp_path), 0, rows, 2))
    t.start()
    try:
        got = gather_refs(str(tmp_path), 1, 2, 2, lambda k: pytest.fail(f"scanned range {k}"), wait_s=30)
    finally:
        t.join()
    _same(got, [_mine(rows, 1, 2)])


def test_gather_refuses_a_file_of_unequal_columns(tmp_path):
    rows = _rows(50, 9)
    with open(refs_path(str(tmp_path), 0, 1), "wb") as f:
        for c in rows[:4] + (rows[4][:-1],):
            np.save(f, c, allow_pickle=False)
    with pytest.raises(ReplayInputError, match="unequal"):
        gather_refs(str(tmp_path), 1, 2, 2, lambda k: rows, wait_s=5)
