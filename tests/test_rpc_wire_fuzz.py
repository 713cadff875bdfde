"""Fuzzing the framed carrier's decoder (_ext/wire_codec.pyx) and the log service's request decoding
behind it, with hypothesis: whatever bytes arrive, in whatever pieces, the reader either decodes
exactly what was encoded or raises the typed error (a WireProtocolError), and never buffers past
its frame limit; the log service answers every call of random bytes with a reply or a typed error."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from logtide._ext import wire_codec as wc
from logtide._ext.frame_codec import split_calls
from logtide.errors import BadWireMagic, FrameTooLarge, LogtideError, MalformedFrame, WireProtocolError

from hypothesis_profiles import scaled

K = wc.KINDS
FUZZ = scaled(150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MAX = 1 << 16

u64 = st.integers(0, (1 << 64) - 1)
text = st.text(max_size=40)
blob = st.binary(max_size=300)
calls = st.lists(st.tuples(u64, st.integers(0, 0xFFFF), blob), min_size=1, max_size=6)
replies = st.lists(st.tuples(u64, blob), max_size=6)
statuses = st.lists(st.tuples(u64, st.integers(0, 0xFFFF), text, text), max_size=3)


def _frame():
    """(encoded frame, what the reader decodes it to)."""
    def calls_frame(cs):
        b = b"".join(struct.pack("<QHI", i, m, len(r)) + r for i, m, r in cs)
        return wc.encode_calls(b), (K["CALLS"], split_calls(b), len(b))

    def replies_frame(rs, ss):
        b = b"".join(struct.pack("<QI", i, len(r)) + r for i, r in rs)
        return wc.encode_replies([b], list(ss)), (K["REPLIES"], b, [tuple(s) for s in ss])
    return st.one_of(
        st.builds(lambda f, ps: (wc.encode_methods(f, ps), (K["METHODS"], f, ps)),
                  st.integers(0, 1000), st.lists(text, max_size=4)),
        st.builds(calls_frame, calls),
        st.builds(replies_frame, replies, statuses),
        st.builds(lambda s, m: (wc.encode_open(s, m), (K["OPEN"], s, m)), u64, st.integers(0, 0xFFFF)),
        st.builds(lambda s, d: (wc.encode_msg(s, d), (K["MSG"], s, d)), u64, blob),
        st.builds(lambda s, c, t, d: (wc.encode_end(s, c, t, d), (K["END"], s, c, t, d)),
                  u64, st.integers(0, 0xFFFF), text, text),
        st.builds(lambda s: (wc.encode_cancel(s), (K["CANCEL"], s)), u64),
        st.builds(lambda s, n: (wc.encode_credit(s, n), (K["CREDIT"], s, n)), u64, st.integers(0, (1 << 32) - 1)),
        st.builds(lambda t, p: (wc.encode_ping(t, p), (K["PONG"] if p else K["PING"], t)), u64, st.booleans()),
        st.builds(lambda c, t, d: (wc.encode_goaway(c, t, d), (K["GOAWAY"], c, t, d)),
                  st.integers(0, 0xFFFF), text, text),
    )


stream = st.lists(_frame(), max_size=8)


def _feed(data: bytes, cuts: list[int], max_frame: int = MAX):
    """Feed data in pieces cut at `cuts`: (reader, frames decoded, the error raised or None)."""
    r = wc.FrameReader(max_frame)
    bound = max(max_frame + wc.HEADER_SIZE, 12)      # a frame, or the 12-byte preface
    out, err = [], None
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    try:
        for a, b in zip(bounds, bounds[1:]):
            out += r.feed(data[a:b])
            assert r.capacity <= bound
    except WireProtocolError as exc:
        err = exc
    assert r.capacity <= bound
    return r, out, err


@FUZZ
@given(stream, st.lists(st.integers(0, 5000), max_size=10))
def test_round_trip_in_any_pieces(frames, cuts):
    data = wc.preface(1234) + b"".join(f for f, _ in frames)
    r, out, err = _feed(data, cuts)
    assert err is None and out == [m for _, m in frames] and r.pending == 0 and r.peer_limit == 1234
    r.finish()


@FUZZ
@given(stream, st.data())
def test_a_cut_stream_decodes_a_prefix_and_says_so_at_the_end(frames, data):
    whole = wc.preface(99) + b"".join(f for f, _ in frames)
    cut = data.draw(st.integers(0, len(whole)))
    r, out, err = _feed(whole[:cut], [cut // 2])
    assert err is None and out == [m for _, m in frames][:len(out)]
    if r.pending:
        with pytest.raises(MalformedFrame):
            r.finish()
    else:
        r.finish()


@FUZZ
@given(st.lists(_frame(), min_size=1, max_size=6), st.data())
def test_a_changed_byte_is_a_typed_error_or_an_unfinished_frame(frames, data):
    whole = bytearray(wc.preface(99) + b"".join(f for f, _ in frames))
    at = data.draw(st.integers(0, len(whole) - 1).filter(lambda i: not 8 <= i < 12))   # not the peer's limit
    whole[at] ^= data.draw(st.integers(1, 255))
    r, out, err = _feed(bytes(whole), data.draw(st.lists(st.integers(0, len(whole)), max_size=4)))
    expected = [m for _, m in frames]
    if at < 8:
        assert isinstance(err, BadWireMagic)
    elif err is None:     # a length made longer: the frames before it, and the reader waits for the rest
        assert out == expected[:len(out)] and len(out) < len(expected) and r.pending


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=5), st.integers(1, 4096))
def test_random_bytes_after_the_preface(junk, cuts, max_frame):
    r, out, err = _feed(wc.preface(1) + junk, cuts, max_frame)
    assert all(isinstance(f, tuple) and 1 <= f[0] <= 11 for f in out)


@FUZZ
@given(st.integers(1, 1 << 12), st.integers(1, 1 << 20))
def test_an_oversized_length_is_refused_before_its_body(max_frame, length):
    head = wc.preface(1) + struct.pack("<II", length, 0)
    r, out, err = _feed(head, [len(head) - 3], max_frame)
    if length > max_frame:
        assert isinstance(err, FrameTooLarge)
    else:
        assert err is None and r.pending == 8


# --- each service's request decoding, behind the frames --------------------------------------------

def _log_service(tmp):
    from logtide import LogService
    from logtide.engine.logservice.rpc_service import LOGSERVICE, LogServiceServicer
    svc = LogService.open(tmp / "log", max_record_size=4096, fsync="never")
    return LOGSERVICE, LogServiceServicer(svc, 1 << 20), svc.close


def _meta_service(tmp):
    from logtide.engine.meta.server import META, MetaServicer
    from logtide.engine.meta.service import MetaService
    svc = MetaService.open(tmp / "meta")
    return META, MetaServicer(svc), svc.close


def _replication(tmp):
    from logtide import LogService
    from logtide.replay.primary import Primary
    from logtide.replay.replication_rpc import REPLICATION, ReplicationServicer
    log = LogService.open(tmp / "log", fsync="never")
    primary = Primary(tmp / "primary", log=log, checkpoint_interval=0)

    def close():
        primary.close()
        log.close()
    return REPLICATION, ReplicationServicer(primary), close


def _logtail(tmp):
    from logtide.engine.logtail import TransactionNode
    from logtide.engine.logtail.service import LOGTAIL, LogtailServicer
    tn = TransactionNode.open(tmp / "tn")
    tn.create_table("t", {"id": "int64"}, "id")
    return LOGTAIL, LogtailServicer(tn), tn.close


SERVICES = {"logservice": _log_service, "meta": _meta_service, "replication": _replication, "logtail": _logtail}


@pytest.fixture(scope="module", params=sorted(SERVICES))
def dispatch(request, tmp_path_factory):
    from logtide.engine.rpc.call_dispatch import CallDispatcher
    from logtide.engine.rpc.service import CallContext
    service, servicer, close = SERVICES[request.param](tmp_path_factory.mktemp(f"fuzz-{request.param}"))
    d = CallDispatcher(1 << 20)
    for m in service.methods.values():
        if m.shape == "unary":
            d.add(m, getattr(servicer, m.name), servicer)
    paths = [m.path for m in service.methods.values() if m.shape == "unary"]
    yield d, paths, CallContext("fuzz")
    close()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 12), st.binary(max_size=64)), min_size=1, max_size=20))
def test_service_requests_of_random_bytes(dispatch, reqs):
    """Each call of random bytes to a unary method of every service (or to an unknown method)
    gets a reply or a typed error, never an INTERNAL bug."""
    from logtide._ext.frame_codec import split_calls
    from logtide.engine.rpc.call_frames import unpack_replies
    d, paths, ctx = dispatch
    b = b"".join(struct.pack("<QHI", i + 1, m % (len(paths) + 1), len(r)) + r for i, (m, r) in enumerate(reqs))
    out = d.run_groups(split_calls(b), paths, 1 << 20, ctx)      # index len(paths): an unknown method
    answered = [i for i, _ in unpack_replies(b"".join(out.frames))] + [e.id for e in out.errors]
    assert sorted(answered) == list(range(1, len(reqs) + 1))      # each call: a reply or a typed error
    for e in out.errors:
        assert e.error_type, e                                   # typed, not an INTERNAL bug
        assert issubclass(_cls(e.error_type), LogtideError)


def _cls(name: str):
    from logtide.engine.rpc.error_mapping import error_class
    return error_class(name)
