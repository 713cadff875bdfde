"""CRC-32C: known vectors, chaining, and the hardware path against the table path."""
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import crc32c
from logtide._ext.crc32c import crc32c_software, hardware_accelerated


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


def test_long_buffers_at_every_stream_boundary():
    """The hardware path sums long buffers as three interleaved streams (chunks of 3 x 2 KiB, then
    3 x 256 B): lengths and alignments about each boundary agree with the table path."""
    data = bytes((i * 7919 + (i >> 5)) & 0xFF for i in range(3 * 6144 + 1000))
    for n in (767, 768, 769, 6143, 6144, 6145, 6144 + 768, 6144 + 767, 2 * 6144 + 769, 3 * 6144 + 999):
        for off in range(0, 9):
            b = data[off:off + n]
            assert crc32c(b) == crc32c_software(b), (n, off)
            assert crc32c(b[n // 3:], crc32c(b[:n // 3])) == crc32c(b)


def test_reports_path():
    assert hardware_accelerated() in (True, False)


def test_bad_input():
    with pytest.raises(TypeError):
        crc32c(123)
