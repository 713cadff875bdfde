"""The WAL-meta stream format: every truncation or byte flip of a message is refused, valid ones round-trip."""
import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.errors import CorruptionError
from logtide.replay.meta_stream import (StreamFormatError, decode_batch, decode_feedback, encode_batch,
                                        encode_feedback)


@given(st.lists(st.binary(min_size=24, max_size=80), max_size=20), st.integers(1, 2**40),
       st.integers(0, 2**63), st.integers(0, 2**63))
@scaled(max_examples=100, deadline=None)
def test_batch_roundtrip(metas, first, w, c):
    lsns = list(range(first, first + len(metas)))
    b = decode_batch(encode_batch(lsns, metas, w, c))
    assert (b.write_lsn, b.consistent_lsn) == (w, c)
    assert b.lsns.tolist() == lsns and [b.meta(i) for i in range(len(metas))] == metas


def test_every_truncation_and_flip_is_refused():
    msg = encode_batch([5, 6, 9], [b"a" * 30, b"b" * 40, b"c" * 25], 9, 4)
    for k in range(len(msg)):
        with pytest.raises(StreamFormatError):
            decode_batch(msg[:k])
    for i in range(len(msg)):
        bad = bytearray(msg)
        bad[i] ^= 0x10
        with pytest.raises(CorruptionError):
            decode_batch(bytes(bad))
    with pytest.raises(StreamFormatError):
        decode_batch(msg + b"\0")
    with pytest.raises(StreamFormatError):
        decode_batch(encode_feedback(1, 2, 3))
    with pytest.raises(StreamFormatError):
        decode_batch(encode_batch([6, 5], [b"x", b"y"], 0, 0))  # LSNs must ascend


def test_feedback_roundtrip_and_refusal():
    fb = encode_feedback(7, 100, 90, seq=3)
    assert tuple(decode_feedback(fb)) == (7, 100, 90, 3)
    for k in range(len(fb)):
        with pytest.raises(StreamFormatError):
            decode_feedback(fb[:k])
    for i in range(len(fb)):
        bad = bytearray(fb)
        bad[i] ^= 1
        with pytest.raises(StreamFormatError):
            decode_feedback(bytes(bad))
