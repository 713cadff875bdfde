"""The pages plan's exchange files (spark/ref_exchange.py) and the dealt split of the segments
among its scan tasks, without Spark."""
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.spark.errors import ReplayInputError
from logtide.spark.page_owner import owners
from logtide.spark.ref_exchange import read_refs, refs_path, write_refs


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
def test_dealt_shares_hold_every_segment_once_and_even_bytes(sizes, tasks):
    from logtide.spark.replay_job import dealt_shares
    shares = dealt_shares(sizes, tasks)
    assert len(shares) == min(tasks, len(sizes))
    assert sorted(i for s in shares for i in s) == list(range(len(sizes)))
    assert all(s == sorted(s) for s in shares)          # each share in log order
    loads = [sum(sizes[i] for i in s) for s in shares]
    assert max(loads) - min(loads) <= max(sizes)         # the greedy deal's bound


def test_dealt_shares_interleave_equal_segments():
    from logtide.spark.replay_job import dealt_shares
    assert dealt_shares([8] * 6 + [1], 2) == [[0, 2, 4, 6], [1, 3, 5]]
    assert dealt_shares([100, 1, 1, 1, 1, 100], 2) == [[0], [1, 2, 3, 4, 5]]   # 100 against 104 bytes
    assert dealt_shares([5, 5, 5], 7) == [[0], [1], [2]]
