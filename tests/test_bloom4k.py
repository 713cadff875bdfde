"""Bloom4K: no false negatives, the theoretical false-positive rate, and a CRC-checked block."""
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import Bloom4K, CorruptBlockError, PageTag, tag_rows
from logtide._ext.bloom4k import optimal_k
from logtide.pagetag import random_tags

tags_st = st.lists(st.tuples(*[st.integers(0, 2**32 - 1)] * 5), max_size=1500)


@scaled(max_examples=200, deadline=None)
@given(tags_st)
def test_no_false_negatives_per_call_and_batch(tags):
    b = Bloom4K()
    for t in tags:
        b.add(PageTag(*t))
    arr = np.array(tags, dtype=np.uint32).reshape(-1, 5)
    assert all(PageTag(*t) in b for t in tags)
    assert all(PageTag(*t).to_bytes() in b for t in tags)
    assert b.contains_many(arr).all()
    b2 = Bloom4K()
    b2.add_many(arr)
    assert b2.to_bytes() == b.to_bytes()  # batch and per-call set the same bits


@scaled(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=500))
def test_no_false_negatives_any_bytes(keys):
    b = Bloom4K(expected_elements=max(1, len(keys)))
    for k in keys:
        b.add(k)
    assert all(k in b for k in keys)
    assert all(bytearray(k) in b for k in keys)


def test_k_from_expected_elements():
    assert optimal_k(819) == 10  # PolarDB: 4064 bytes, 819 elements, k = 10
    assert Bloom4K().k == 10
    assert optimal_k(32512) == 1
    assert optimal_k(4000) == 6  # ln2 * 32512 / 4000 = 5.63
    assert Bloom4K(expected_elements=4000).k == 6
    with pytest.raises(ValueError):
        optimal_k(0)


def test_false_positive_rate_matches_theory():
    """At 819 elements k=10 and theory is (1 - e^{-kn/m})^k ~ 3.0e-7; measure within +-25%.

    ~5e8 deterministic probes over 8 independent blocks give ~150 expected false positives,
    so +-25% is three standard deviations of the count.
    """
    n, m, k = 819, 32512, 10
    theory = (1 - math.exp(-k * n / m)) ** k
    blocks = []
    for s in range(8):
        b = Bloom4K()
        b.add_many(random_tags(n, seed=100 + s, relations=1 << 16, blocks=1 << 30))
        blocks.append(b)
    chunk = 4_000_000
    probes = np.zeros((chunk, 5), dtype=np.uint32)
    probes[:, 0] = 7777  # a tablespace no inserted tag uses: every hit is a false positive
    fp = total = 0
    for c in range(16):
        probes[:, 1] = c
        probes[:, 4] = np.arange(chunk, dtype=np.uint32)
        for b in blocks:
            fp += int(b.contains_many(probes).sum())
            total += chunk
    measured = fp / total
    assert 0.75 * theory <= measured <= 1.25 * theory, (fp, total, measured, theory)


def test_round_trip():
    b = Bloom4K(table_id=42, min_lsn=1000, max_lsn=2000)
    tags = random_tags(819, seed=3)
    b.add_many(tags)
    raw = b.to_bytes()
    assert len(raw) == 4096
    c = Bloom4K.from_bytes(raw)
    assert (c.table_id, c.min_lsn, c.max_lsn, c.k) == (42, 1000, 2000, 10)
    assert c.to_bytes() == raw
    assert c.contains_many(tags).all()
    assert c == b
    assert pickle.loads(pickle.dumps(b)) == b
    assert Bloom4K.from_bytes(bytearray(raw)) == b
    assert Bloom4K.from_bytes(memoryview(raw)) == b


def test_header_layout():
    b = Bloom4K(table_id=7, min_lsn=2**40 + 1, max_lsn=2**63)
    raw = b.to_bytes()
    assert int.from_bytes(raw[0:8], "little") == 7
    assert int.from_bytes(raw[8:16], "little") == 2**40 + 1
    assert int.from_bytes(raw[16:24], "little") == 2**63
    assert int.from_bytes(raw[24:28], "little") == 4064 * 8


def test_every_single_bit_flip_is_detected():
    b = Bloom4K(table_id=1, min_lsn=5, max_lsn=9)
    b.add_many(random_tags(300, seed=5))
    raw = bytearray(b.to_bytes())
    for bit in range(len(raw) * 8):
        raw[bit >> 3] ^= 1 << (bit & 7)
        with pytest.raises(CorruptBlockError):
            Bloom4K.from_bytes(raw)
        raw[bit >> 3] ^= 1 << (bit & 7)
    Bloom4K.from_bytes(raw)  # and the original still parses


def test_wrong_size_and_types():
    raw = Bloom4K().to_bytes()
    for bad in (raw[:-1], raw + b"\0", b""):
        with pytest.raises(CorruptBlockError, match="4096"):
            Bloom4K.from_bytes(bad)
    with pytest.raises(TypeError):
        Bloom4K.from_bytes(12)
    b = Bloom4K()
    with pytest.raises(TypeError):
        b.add(1.5)
    with pytest.raises(TypeError):
        b.add("text")
    with pytest.raises(OverflowError):
        b.add((1, 2, 3, 4, -5))
    with pytest.raises(ValueError):
        b.add_many(np.zeros(5, np.uint32))


def test_pagetags_in_any_integer_dtype_are_the_same_keys():
    """Five integer columns are PageTags whatever their dtype: numpy's default int64 rows were
    hashed as 40-byte keys, so no PageTag lookup found them (false negatives). A float field is
    refused, never truncated to another page."""
    rows = [(1663, 5, 16384, 0, k) for k in range(10)]
    for spelled in (np.array(rows), np.array(rows, np.int32), np.array(rows, np.uint64), rows):
        b = Bloom4K()
        b.add_many(spelled)
        assert all(PageTag(*r) in b for r in rows)
        assert b.contains_many(np.array(rows, np.uint32)).all() and b.contains_many(spelled).all()
        assert b.to_bytes() == _added(np.array(rows, np.uint32)).to_bytes()
    b = Bloom4K()
    for bad in ((1663, 5, 16384, 0, 7.9), (1663, 5, 16384, np.float32(0), 7)):
        with pytest.raises(TypeError):
            b.add(bad)
        with pytest.raises(TypeError):
            bad in b                                            # noqa: B015
    with pytest.raises(ValueError, match="u32"):
        b.add_many(np.array([[1663, 5, 16384, 0, -1]]))
    with pytest.raises(ValueError, match="u32"):
        b.add_many(np.array([[1663, 5, 16384, 0, 2**32]]))
    with pytest.raises(TypeError):
        b.add_many(np.array([[1663, 5, 16384, 0, 7.5]]))
    assert b.to_bytes() == Bloom4K().to_bytes(), "a refused add sets no bit"


def _added(tags) -> Bloom4K:
    b = Bloom4K()
    b.add_many(tags)
    return b


def test_views_are_interchangeable():
    tags = random_tags(100, seed=9)
    a, c = Bloom4K(), Bloom4K()
    a.add_many(tags)
    c.add_many(tag_rows(tags))
    assert a == c
    assert a.contains_many(tag_rows(tags)).all()


def test_threaded_batches_equal_one_thread():
    b = Bloom4K()
    b.add_many(random_tags(819, seed=21))
    probes = random_tags(600_000, seed=22)
    probes[::7] = random_tags(819, seed=21)[np.arange(0, len(probes), 7) % 819]
    one = b.contains_many(probes, threads=1)
    assert np.array_equal(one, b.contains_many(probes, threads=2))
    assert np.array_equal(one, b.contains_many(probes, threads=4))
    assert np.array_equal(one, b.contains_many(probes))
    assert one[::7].all()


@pytest.mark.timeout(120)
def test_forked_child_can_use_batches():
    """The worker pool belongs to the process that made it: a forked child must not wait on it."""
    import os
    b = Bloom4K()
    tags = random_tags(819, seed=23)
    b.add_many(tags)
    big = np.concatenate([tags] * 400)
    assert b.contains_many(big, threads=2).all()  # the parent's pool now exists
    pid = os.fork()
    if pid == 0:
        ok = b.contains_many(big, threads=2).all()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
