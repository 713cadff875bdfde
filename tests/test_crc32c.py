"""CRC-32C: known vectors, chaining, and the hardware path against the table path."""
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide._ext.crc32c import clmul_accelerated, crc32c_crc32_instruction, crc32c_software, hardware_accelerated


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


def test_bad_input():
    with pytest.raises(TypeError):
        crc32c(123)
