"""CRC-32C: known vectors, chaining, and the hardware path against the table path."""
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide._ext.crc32c import (clmul_accelerated, crc32c_combine, crc32c_combine_software, crc32c_crc32_instruction,
                                 crc32c_software, hardware_accelerated)


def test_known_vectors():
    # RFC 3720 (iSCSI) appendix B.4 and the standard check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(b"") == 0


@scaled(max_examples=500, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=300))
def test_chaining_and_paths_agree(a, b):
    whole = crc32c(a + b)
    assert crc32c(b, crc32c(a)) == whole
    assert crc32c_software(a + b) == whole
    assert crc32c(bytearray(a + b)) == whole
    assert crc32c(memoryview(a + b)) == whole


def test_reports_path():
    assert hardware_accelerated() in (True, False)
    assert clmul_accelerated() in (True, False)
    assert not clmul_accelerated() or hardware_accelerated()


@scaled(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=12000), st.integers(0, 63), st.integers(0, 2**32 - 1))
def test_long_buffers_fold_to_the_same_crc(data, skip, crc):
    """The carry-less-multiplication folds (buffers of 128 bytes and more), at any alignment and
    from any running CRC, against the crc32-instruction path and the table path."""
    view = memoryview(data)[min(skip, len(data)):]
    want = crc32c_software(view, crc)
    assert crc32c(view, crc) == want
    assert crc32c_crc32_instruction(view, crc) == want


def test_fold_edges():
    """Lengths around the folding path's steps (128-byte minimum, 64-byte loop, 16-byte tail)."""
    data = bytes((i * 131 + 7) & 0xFF for i in range(1100))
    for n in list(range(100, 300)) + [1023, 1024, 1025, 1087, 1088, 1089]:
        assert crc32c(data[:n]) == crc32c_software(data[:n]), n
    assert crc32c(bytes(4096)) == crc32c_software(bytes(4096))
    assert crc32c(b"\xff" * 4096) == crc32c_software(b"\xff" * 4096)


@scaled(max_examples=500, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=20000), st.integers(0, 2**32 - 1))
def test_combine_is_the_crc_of_the_concatenation(a, b, crc):
    """crc32c_combine(crc of a, crc of b, len(b)) is the crc of a + b (from any running CRC),
    by the carry-less path and by the bit-serial one."""
    c1 = crc32c(a, crc)
    want = crc32c(b, c1)
    assert crc32c_combine(c1, crc32c(b), len(b)) == want
    assert crc32c_combine_software(c1, crc32c(b), len(b)) == want


@scaled(max_examples=500, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_combine_paths_agree_at_any_length(c1, c2, n):
    """Up to 2^64 - 1 bytes (every byte of the length picks a factor): the two paths agree."""
    assert crc32c_combine(c1, c2, n) == crc32c_combine_software(c1, c2, n)


def test_combine_edges():
    data = bytes((i * 29 + 3) & 0xFF for i in range(70000))
    for n in (0, 1, 2, 3, 4, 5, 255, 256, 257, 65535, 65536, 65537):
        a, b = data[:1000], data[1000:1000 + n]
        assert crc32c_combine(crc32c(a), crc32c(b), n) == crc32c(a + b), n
    assert crc32c_combine(0x12345678, 0, 0) == 0x12345678
    with pytest.raises(OverflowError):
        crc32c_combine(-1, 0, 3)
    with pytest.raises(OverflowError):
        crc32c_combine(0, 0, -3)
    with pytest.raises(TypeError):
        crc32c_combine(b"x", 0, 3)


def test_bad_input():
    with pytest.raises(TypeError):
        crc32c(123)
