"""The packed call and reply frames of a batch (engine/rpc/call_frames.py, the model of the C
codecs) against a simpler model."""
from __future__ import annotations


import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.rpc.call_frames import (MalformedFrames, pack_call, pack_reply, unpack_calls,
                                            unpack_replies)
from logtide.errors import InvalidRequest

pytestmark = pytest.mark.timeout(120)


def model_split(blob: bytes, fields: list[int]) -> list[tuple] | None:
    """The model: read little-endian fixed-width fields then a length-prefixed body, byte by byte;
    None when the blob does not split into whole frames."""
    out, pos = [], 0
    while pos < len(blob):
        vals = []
        for width in fields + [4]:
            if pos + width > len(blob):
                return None
            vals.append(int.from_bytes(blob[pos:pos + width], "little"))
            pos += width
        n = vals.pop()
        if pos + n > len(blob):
            return None
        out.append((*vals, blob[pos:pos + n]))
        pos += n
    return out


def parse_or_none(fn, blob):
    try:
        return fn(blob)
    except MalformedFrames:
        return None


calls = st.lists(st.tuples(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 16) - 1),
                           st.binary(max_size=300)), max_size=20)
replies = st.lists(st.tuples(st.integers(0, (1 << 64) - 1), st.binary(max_size=300)), max_size=20)


@scaled(max_examples=300, deadline=None)
@given(calls)
def test_calls_round_trip(cs):
    blob = b"".join(pack_call(*c) for c in cs)
    assert unpack_calls(blob) == cs
    assert model_split(blob, [8, 2]) == cs


@scaled(max_examples=300, deadline=None)
@given(replies)
def test_replies_round_trip(rs):
    blob = b"".join(pack_reply(*r) for r in rs)
    assert unpack_replies(blob) == rs
    assert model_split(blob, [8]) == rs


@scaled(max_examples=500, deadline=None)
@given(calls, st.integers(0, 40), st.binary(max_size=24), st.data())
def test_damaged_blobs_parse_as_the_model_does(cs, cut, junk, data):
    """Truncated, extended or overwritten blobs: the same frames as the model, or MalformedFrames
    exactly when the model finds no whole frames."""
    blob = b"".join(pack_call(*c) for c in cs)
    how = data.draw(st.sampled_from(["truncate", "append", "overwrite"]))
    if how == "truncate":
        blob = blob[:max(0, len(blob) - cut)]
    elif how == "append":
        blob = blob + junk
    else:
        at = data.draw(st.integers(0, max(0, len(blob) - 1)))
        blob = blob[:at] + junk + blob[at + len(junk):]
    assert parse_or_none(unpack_calls, blob) == model_split(blob, [8, 2])
    assert parse_or_none(unpack_replies, blob) == model_split(blob, [8])


def test_malformed_frames_is_a_typed_invalid_request():
    with pytest.raises(MalformedFrames) as e:
        unpack_calls(pack_call(1, 0, b"abc")[:-1])
    assert isinstance(e.value, InvalidRequest) and "past the end" in str(e.value)
    with pytest.raises(MalformedFrames, match="header needs"):
        unpack_replies(b"\x00" * 5)
    assert unpack_calls(b"") == [] and unpack_replies(b"") == []
