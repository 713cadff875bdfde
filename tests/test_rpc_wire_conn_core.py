"""The framed server's connection core (_ext/wire_conn.pyx) against the general path it short-cuts:
two real WireServers, one answering on-loop `frames_` hooks in C and one through run_calls
(`hooks_in_c = False`), are handed the same byte stream, cut at the same points, on a real
connection each; what each writes back to its client (replies, pongs, stream ENDs, GOAWAY with its
typed error) must be byte for byte the same. The streams mix frame kinds, calls whose hooks reply,
fail a call, raise, answer oddly or reply past the client's frame limit, unbound method indexes,
changed bytes and streams cut off in a frame."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from logtide._ext import wire_codec as wc
from logtide._ext.frame_codec import pack_replies
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import InvalidRequest

from hypothesis_profiles import scaled

FUZZ = scaled(100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.function_scoped_fixture])
PING = DIAGNOSTICS.methods["Ping"].path
COUNT = DIAGNOSTICS.methods["Count"].path


class Hooked(DiagnosticsServicer):
    """Ping's frames hook; a batch's first request's first byte picks how it answers."""

    def frames_Ping(self, ids: list, requests: list, ctx) -> tuple:
        how = requests[0][:1]
        if how == b"\x01":
            raise ValueError("the whole group fails")
        if how == b"\x02":
            return pack_replies(ids[1:], requests[1:]), [(ids[0], InvalidRequest("the first call is refused"))]
        if how == b"\x03":
            return bytearray(pack_replies(ids, requests)), []       # not bytes: a servicer's bug
        if how == b"\x04":
            return pack_replies(ids, requests), ()                  # no failures, as a tuple
        return pack_replies(ids, requests), []


@pytest.fixture(scope="module")
def servers():
    pair = []
    for in_c in (True, False):
        s = WireServer("127.0.0.1:0")
        s.hooks_in_c = in_c
        s.add_service(DIAGNOSTICS, Hooked("fuzz"))
        s.start()
        pair.append(s)
    yield pair
    for s in pair:
        s.stop(0)


def _answer(server: WireServer, pieces: list[bytes]) -> bytes:
    """Everything `server` writes to a fresh connection whose reads are `pieces`, then its end."""
    cli = socket.create_connection(("127.0.0.1", server.port))
    me = "%s:%d" % cli.getsockname()
    deadline = time.monotonic() + 10
    while (conn := next((c for c in list(server.conns) if c.peer == me), None)) is None:
        assert time.monotonic() < deadline, "the server did not take the connection"
        time.sleep(0.001)

    async def drive():
        for p in pieces:
            conn.data_received(p)       # the transport's reads, cut exactly here
        conn.eof_received()
        if not conn.closed:
            conn.tr.close()
    server.wl.run(drive(), "feeding a connection")
    cli.settimeout(10)
    out = []
    while b := cli.recv(1 << 16):
        out.append(b)
    cli.close()
    return b"".join(out)


u64 = st.integers(0, (1 << 64) - 1)
request = st.one_of(st.binary(max_size=120), st.sampled_from([b"\x01", b"\x02ab", b"\x03", b"\x04x"]))


def _calls(cs) -> bytes:
    return wc.encode_calls(b"".join(struct.pack("<QHI", i, m, len(r)) + r for i, m, r in cs))


frame = st.one_of(
    st.builds(_calls, st.lists(st.tuples(u64, st.sampled_from([0, 0, 0, 1, 2]), request), min_size=1, max_size=5)),
    st.builds(wc.encode_methods, st.integers(0, 2), st.lists(st.sampled_from([PING, COUNT]), max_size=2)),
    st.builds(lambda t, p: wc.encode_ping(t, p), u64, st.booleans()),
    st.builds(wc.encode_open, st.integers(1, 3), st.integers(0, 2)),
    st.builds(wc.encode_cancel, st.integers(1, 3)),
)


@FUZZ
@given(st.sampled_from([120, 400, 1 << 16]), st.lists(frame, max_size=10), st.data())
def test_the_c_core_answers_as_the_general_path(servers, limit, frames, data):
    whole = bytearray(wc.preface(limit) + wc.encode_methods(0, [PING]) + b"".join(frames))
    if data.draw(st.booleans()):                     # a changed byte: a typed error (or a frame left waiting)
        at = data.draw(st.integers(12, len(whole) - 1))
        whole[at] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):                     # cut off, maybe in a frame
        del whole[data.draw(st.integers(0, len(whole))):]
    if data.draw(st.booleans()):                     # garbage after the frames
        whole += data.draw(st.binary(min_size=1, max_size=40))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(whole) - 1)), max_size=8))))
    pieces = [bytes(whole[a:b]) for a, b in zip([0] + cuts, cuts + [len(whole)]) if b > a]
    fast, general = servers
    assert _answer(fast, pieces) == _answer(general, pieces)


def test_the_c_core_answers_on_loop_hooks(servers):
    """The core is what answers there: the fast server's connection holds Ping's hook, the general
    one's does not, and both echo."""
    body = wc.preface(1 << 16) + wc.encode_methods(0, [PING]) + _calls([(7, 0, b"\x0a\x02hi")])
    seen = []
    for s in servers:
        orig = WireServer.run_calls

        def counted(self, conn, groups, _orig=orig):
            seen.append(self)
            return _orig(self, conn, groups)
        WireServer.run_calls = counted
        try:
            out = _answer(s, [body])
        finally:
            WireServer.run_calls = orig
        assert pack_replies([7], [b"\x0a\x02hi"]) in out
    assert seen == [servers[1]]                      # only the general server went through run_calls
