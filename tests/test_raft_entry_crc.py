"""_ext/raft_entry_crc.pyx against the reference: crc32c over struct ">QQB" (term, index, type), then the data."""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from logtide._ext.crc32c import crc32c
from logtide._ext.raft_entry_crc import entry_crc

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def reference(term: int, index: int, etype: int, data: bytes) -> int:
    return crc32c(data, crc32c(struct.pack(">QQB", term, index, etype)))


@settings(max_examples=300, deadline=None)
@given(U64, U64, st.integers(min_value=0, max_value=255), st.binary(max_size=600))
def test_entry_crc_matches_the_reference(term, index, etype, data):
    want = reference(term, index, etype, data)
    assert entry_crc(term, index, etype, data) == want
    assert entry_crc(term, index, etype, bytearray(data)) == want
    assert entry_crc(term, index, etype, memoryview(data)) == want


def test_entry_crc_of_empty_data_is_the_key_crc():
    assert entry_crc(7, 9, 1, b"") == crc32c(struct.pack(">QQB", 7, 9, 1))
