"""murmur3 x64-128 against the mmh3 oracle, per call and in batches."""
import mmh3
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import murmur3_128, murmur3_128_many, PageTag, tag_rows


@scaled(max_examples=2000, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=2**32 - 1))
def test_equals_mmh3(data, seed):
    assert murmur3_128(data, seed) == mmh3.hash128(data, seed, signed=False)


@pytest.mark.parametrize("n", range(0, 40))
def test_every_tail_length(n):
    data = bytes(range(n))
    assert murmur3_128(data) == mmh3.hash128(data, 0, signed=False)
    assert murmur3_128(data, 0xFFFFFFFF) == mmh3.hash128(data, 0xFFFFFFFF, signed=False)


def test_bytes_like_inputs_agree():
    data = b"logtide-page-tag-0001"
    ref = murmur3_128(data)
    assert murmur3_128(bytearray(data)) == ref
    assert murmur3_128(memoryview(data)) == ref
    assert murmur3_128(np.frombuffer(data, np.uint8)) == ref
    assert murmur3_128(data.decode()) == ref  # str hashes as UTF-8, like mmh3


@scaled(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=50),
       st.integers(min_value=0, max_value=2**32 - 1))
def test_batch_equals_per_call(width, n, seed):
    rows = np.random.default_rng(width * 1000 + n).integers(0, 256, (n, width), dtype=np.uint8)
    out = murmur3_128_many(rows, seed)
    assert out.shape == (n, 2) and out.dtype == np.uint64
    for i in range(n):
        h = mmh3.hash128(rows[i].tobytes(), seed, signed=False)
        assert int(out[i, 0]) == h & (2**64 - 1)
        assert int(out[i, 1]) == h >> 64


def test_batch_over_pagetag_arrays():
    tags = [PageTag(1663, 5, 16384 + i, 0, i * 7) for i in range(100)]
    arr = np.array(tags, dtype=np.uint32)
    a = murmur3_128_many(arr)
    b = murmur3_128_many(tag_rows(arr))
    assert np.array_equal(a, b)
    for t, (lo, hi) in zip(tags, a):
        assert (int(hi) << 64 | int(lo)) == mmh3.hash128(t.to_bytes(), 0, signed=False)


def test_bad_input_is_typed():
    with pytest.raises(TypeError):
        murmur3_128(12345)
    with pytest.raises(ValueError):
        murmur3_128(b"x", -1)
    with pytest.raises(ValueError):
        murmur3_128(b"x", 2**32)
    with pytest.raises(TypeError):
        murmur3_128(b"x", "seed")
    with pytest.raises(ValueError):
        murmur3_128_many(np.zeros(10, np.uint8))
    with pytest.raises(TypeError):
        murmur3_128_many(np.zeros((3, 2), np.float64))
