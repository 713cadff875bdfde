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


def test_reports_path():
    assert hardware_accelerated() in (True, False)


def test_bad_input():
    with pytest.raises(TypeError):
        crc32c(123)
