"""_ext/frame_codec.pyx (the pipeline server's frames in C) against the byte-level model of
engine/rpc/call_frames.py and against protobuf itself (the hand-written AppendRequest decoder)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

import pytest

from logtide._ext.frame_codec import decode_appends, pack_counter_replies, pack_replies, split_calls
from logtide.engine.logservice import logservice_pb2 as lpb
from logtide.engine.rpc.call_frames import MalformedFrames, pack_call, pack_reply, unpack_calls

U64 = st.integers(0, (1 << 64) - 1)
calls = st.lists(st.tuples(U64, st.integers(0, 3), st.binary(max_size=40)), max_size=12)


def _model_split(blob: bytes):
    """split_calls by the model: unpack_calls, grouped per method in order of first appearance."""
    groups: dict[int, tuple[int, list, list]] = {}
    for cid, m, data in unpack_calls(blob):
        g = groups.setdefault(m, (m, [], []))
        g[1].append(cid)
        g[2].append(data)
    return list(groups.values())


def _outcome(fn, blob):
    try:
        return fn(blob)
    except MalformedFrames:
        return MalformedFrames


@scaled(max_examples=300, deadline=None)
@given(calls, st.data())
def test_split_calls_matches_the_model_on_whole_and_damaged_blobs(cs, data):
    blob = b"".join(pack_call(i, m, d) for i, m, d in cs)
    assert split_calls(blob) == _model_split(blob)
    # damaged: cut short, extended, or a byte overwritten (a length field may then run past the end)
    if blob:
        cut = data.draw(st.integers(0, len(blob)))
        at = data.draw(st.integers(0, len(blob) - 1))
        damaged = [blob[:cut], blob + data.draw(st.binary(min_size=1, max_size=20)),
                   blob[:at] + bytes([data.draw(st.integers(0, 255))]) + blob[at + 1:]]
        for d in damaged:
            assert _outcome(split_calls, d) == _outcome(_model_split, d)


@given(st.lists(st.tuples(U64, st.binary(max_size=40)), max_size=12))
def test_pack_replies_matches_the_model(rs):
    assert pack_replies([i for i, _ in rs], [r for _, r in rs]) == b"".join(pack_reply(i, r) for i, r in rs)


def test_pack_replies_refuses_mismatched_input():
    with pytest.raises(ValueError):
        pack_replies([1, 2], [b"a"])
    with pytest.raises(TypeError):
        pack_replies([1], ["text"])


@given(st.lists(U64, max_size=10), st.one_of(st.integers(0, 300), st.integers((1 << 64) - 20, (1 << 64) - 11), U64))
def test_pack_counter_replies_are_append_responses(ids, first):
    if ids and first + len(ids) - 1 >= 1 << 64:
        with pytest.raises(OverflowError):
            pack_counter_replies(ids, first)
        return
    want = b"".join(pack_reply(i, lpb.AppendResponse(first_lsn=first + k).SerializeToString())
                    for k, i in enumerate(ids))
    assert pack_counter_replies(ids, first) == want


# --- decode_appends against protobuf ---------------------------------------------------------------

MAX_PAYLOAD = 64

plain = st.builds(lambda p, r, t: lpb.AppendRequest(payloads=[p], replica_id=r, type=t),
                  st.binary(max_size=MAX_PAYLOAD), U64, st.integers(0, (1 << 32) - 1))
other = st.one_of(
    st.builds(lambda ps, r: lpb.AppendRequest(payloads=ps, replica_id=r),
              st.lists(st.binary(max_size=10), min_size=0, max_size=3), U64),
    st.builds(lambda p: lpb.AppendRequest(payloads=[p], raw=True), st.binary(max_size=20)),
    st.builds(lambda p: lpb.AppendRequest(payloads=[p]), st.binary(min_size=MAX_PAYLOAD + 1, max_size=MAX_PAYLOAD + 9)),
)


def _request_bytes(draw_msg, data) -> bytes:
    """A serialized request, sometimes mangled: cut, extended, a byte changed, or fields repeated."""
    raw = draw_msg.SerializeToString()
    how = data.draw(st.sampled_from(["as is", "as is", "cut", "extend", "flip", "twice"]))
    if how == "cut":
        return raw[:data.draw(st.integers(0, len(raw)))]
    if how == "extend":
        return raw + data.draw(st.binary(min_size=1, max_size=8))
    if how == "flip" and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    if how == "twice":
        return raw + raw
    return raw


@scaled(max_examples=300, deadline=None)
@given(st.lists(st.one_of(plain, other), max_size=10), st.data())
def test_decode_appends_agrees_with_protobuf(msgs, data):
    reqs = [_request_bytes(m, data) for m in msgs]
    ids = list(range(100, 100 + len(reqs)))
    f_ids, payloads, rids, types, slow = decode_appends(ids, reqs, MAX_PAYLOAD)
    fast_pos = [k for k in range(len(reqs)) if k not in set(slow)]
    assert f_ids == [ids[k] for k in fast_pos] and sorted(slow) == slow
    for k, p, r, t in zip(fast_pos, payloads, rids, types):
        want = lpb.AppendRequest.FromString(reqs[k])   # whatever the fast path took, protobuf reads alike
        assert (list(want.payloads), want.replica_id, want.type, want.raw) == ([p], r, t, False)
    for k, m in enumerate(msgs):                    # every plain, canonical request takes the fast path
        if reqs[k] == m.SerializeToString() and len(m.payloads) == 1 and not m.raw \
                and len(m.payloads[0]) <= MAX_PAYLOAD:
            assert k in fast_pos, m


def test_decode_appends_sends_non_bytes_to_the_slow_path():
    assert decode_appends([1, 2], ["text", b"\x0a\x01x"], 10) == ([2], [b"x"], [0], [0], [0])


# --- the client's side: encode_append / decode_counter against protobuf ---------------------------

@scaled(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.one_of(U64, st.integers(-5, -1), st.integers(1 << 64, (1 << 64) + 5)),
       st.one_of(st.integers(0, (1 << 32) - 1), st.integers(-3, -1), st.integers(1 << 32, (1 << 32) + 3)))
def test_encode_append_is_protobufs_bytes_or_declines(payload, replica_id, rtype):
    from logtide._ext.frame_codec import encode_append
    data = encode_append(payload, replica_id, rtype)
    if 0 <= replica_id < 1 << 64 and 0 <= rtype < 1 << 32:
        assert data == lpb.AppendRequest(payloads=[payload], replica_id=replica_id, type=rtype).SerializeToString()
        # and the server's C decoder reads back what the client's C encoder wrote
        f_ids, payloads, rids, types, slow = decode_appends([7], [data], 1 << 20)
        assert (f_ids, payloads, rids, types, slow) == ([7], [payload], [replica_id], [rtype], [])
    else:
        assert data is None                         # the protobuf path raises the typed error


def test_encode_append_declines_what_it_does_not_take():
    from logtide._ext.frame_codec import encode_append
    assert encode_append(bytearray(b"x"), 0, 0) is None
    assert encode_append(b"x", True, 0) is None
    assert encode_append(b"x", 0, False) is None
    assert encode_append(b"x", 1.0, 0) is None
    assert encode_append(b"x", 0, "1") is None


def _proto_counter(b: bytes):
    try:
        return lpb.AppendResponse.FromString(b).first_lsn
    except Exception:  # noqa: BLE001 - not a message protobuf parses
        return None


@scaled(max_examples=500, deadline=None)
@given(st.one_of(U64.map(lambda v: lpb.AppendResponse(first_lsn=v).SerializeToString()),
                 st.binary(max_size=14),
                 st.tuples(U64, st.binary(max_size=6)).map(
                     lambda t: lpb.AppendResponse(first_lsn=t[0]).SerializeToString() + t[1])))
def test_decode_counter_agrees_with_protobuf_or_declines(reply):
    from logtide._ext.frame_codec import decode_counter
    v = decode_counter(reply)
    if v == -1:
        return                                      # declined: the client parses it with protobuf
    assert v == _proto_counter(reply)


# --- the replicated client's side: encode_rappend against protobuf ------------------------------

def _bad_u64():
    return st.one_of(st.integers(-5, -1), st.integers(1 << 64, (1 << 64) + 5))


@scaled(max_examples=300, deadline=None)
@given(st.one_of(U64, _bad_u64()), st.one_of(U64, _bad_u64()),
       st.one_of(st.integers(0, (1 << 32) - 1), st.integers(-3, -1), st.integers(1 << 32, (1 << 32) + 3)),
       st.binary(max_size=20), st.binary(max_size=300))
def test_encode_rappend_is_protobufs_bytes_or_declines(client, seq, rtype, prefix, payload):
    from logtide._ext.frame_codec import encode_rappend
    from logtide.engine.logservice import replicated_pb2 as rpb
    data = encode_rappend(client, seq, rtype, prefix, payload)
    if 0 <= client < 1 << 64 and 0 <= seq < 1 << 64 and 0 <= rtype < 1 << 32:
        want = rpb.RAppendRequest(client=client, seq=seq, type=rtype, data=prefix + payload)
        assert data == want.SerializeToString()
        assert rpb.RAppendRequest.FromString(data) == want
    else:
        assert data is None                         # the caller's checks give the typed error


def test_encode_rappend_declines_what_it_does_not_take():
    from logtide._ext.frame_codec import encode_rappend
    assert encode_rappend(1, 1, 1, b"", bytearray(b"x")) is None
    assert encode_rappend(True, 1, 1, b"", b"x") is None
    assert encode_rappend(1, 1, False, b"", b"x") is None
    assert encode_rappend(1, 1.0, 1, b"", b"x") is None
    with pytest.raises(TypeError):
        encode_rappend(1, 1, 1, None, b"x")
    with pytest.raises(TypeError):
        encode_rappend(1, 1, 1, bytearray(), b"x")
