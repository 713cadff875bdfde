"""The call pipeline's packed framing (engine/rpc/call_frames.py) against a simple model, and a
misbehaving server whose reply frames do not parse."""
from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.rpc import connect
from logtide.engine.rpc import pipeline_pb2 as ppb
from logtide.engine.rpc.call_frames import (MalformedFrames, pack_call, pack_reply, unpack_calls,
                                            unpack_replies)
from logtide.engine.rpc.diagnostics import DIAGNOSTICS
from logtide.errors import InvalidRequest, RpcStreamBroken

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


class _GarbageReplies:
    """A real gRPC server on the pipeline path that answers every batch with a reply frame cut short."""

    def __init__(self) -> None:
        self.streams = 0

    def __call__(self, raws, context):
        self.streams += 1
        for raw in raws:
            first = unpack_calls(ppb.CallBatch.FromString(raw).frames)[0][0]
            yield ppb.ReplyBatch(frames=pack_reply(first, b"\x08\x01")[:-1]).SerializeToString()


def test_reply_frames_that_do_not_parse_break_the_stream_and_the_next_call_reconnects():
    garbage = _GarbageReplies()
    bad = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[
        grpc.method_handlers_generic_handler("logtide.rpc.Pipeline", {
            "Calls": grpc.stream_stream_rpc_method_handler(garbage)})])
    port = bad.add_insecure_port("127.0.0.1:0")
    bad.start()
    try:
        with connect(DIAGNOSTICS, f"127.0.0.1:{port}", pipelined=True, timeout=10) as c:
            out: list = []

            def call():
                try:
                    out.append(c.Ping(payload=b"p"))
                except Exception as exc:  # noqa: BLE001 - asserted below
                    out.append(exc)
            ths = [threading.Thread(target=call) for _ in range(4)]
            for th in ths:
                th.start()
            for th in ths:
                th.join(30)
            assert len(out) == 4 and all(isinstance(e, RpcStreamBroken) for e in out), out
            assert any("MalformedFrames" in str(e) for e in out), out
            opened = garbage.streams
            with pytest.raises(RpcStreamBroken):        # the next call opens a new stream (which breaks alike)
                c.Ping(payload=b"again")
            assert garbage.streams == opened + 1
    finally:
        bad.stop(0)


def test_reply_messages_split_at_the_batch_limit_and_keep_every_reply():
    from logtide.engine.rpc.pipeline_server import MAX_REPLY_BATCH_BYTES, Replies, reply_lists
    lists, want_ok, want_err = [], {}, set()
    for b in range(3):
        r = Replies()
        for i in range(5):
            call_id = b * 100 + i
            data = bytes([i]) * (40 << 10)          # 15 replies of 40 KiB: more than one message's worth
            r.frames.append(pack_reply(call_id, data))
            r.size += len(data)
            want_ok[call_id] = data
        r.error(ppb.PipelinedReply(id=b * 100 + 99, code=3, details="bad"))
        want_err.add(b * 100 + 99)
        lists.append(r)
    msgs = list(reply_lists(lists))
    assert len(msgs) > 1
    got_ok, got_err = {}, set()
    for raw in msgs:
        assert len(raw) <= MAX_REPLY_BATCH_BYTES + (64 << 10)
        rb = ppb.ReplyBatch.FromString(raw)
        got_ok.update(unpack_replies(rb.frames))
        got_err.update(e.id for e in rb.errors)
    assert got_ok == want_ok and got_err == want_err
