"""The log service's state machine behind engine.statemachine.StateMachine: deterministic updates,
refused commands change nothing, snapshots round-trip and are verified."""
from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logservice.state_machine import LogStateMachine, command
from logtide.engine.statemachine import Entry, StateMachine
from logtide.errors import CorruptionError, InvalidArgument, InvalidTruncateLsn, LogtideError

commands = st.one_of(
    st.builds(lambda lsn, latest: command("truncate", lsn=lsn, latest=latest), st.integers(0, 50), st.integers(0, 60)),
    st.builds(lambda limit: command("reserve_tso", limit=limit), st.integers(0, 10**6)),
    st.builds(lambda n, lsn: command("register", name=n, lsn=lsn), st.sampled_from("abc"), st.integers(0, 40)),
    st.builds(lambda n, lsn: command("report", name=n, lsn=lsn), st.sampled_from("abc"), st.integers(0, 40)),
    st.builds(lambda n: command("unregister", name=n), st.sampled_from("abc")),
    st.sampled_from([b"not json", b'{"op": "explode"}', b"{}"]),
)


def apply_all(cmds):
    sm, results = LogStateMachine(), []
    for c in cmds:
        before = sm.index, dict(sm.readers), sm.truncated_lsn, sm.tso_limit
        try:
            results.append(("ok", sm.update(Entry(sm.index + 1, c))))
        except LogtideError as exc:
            results.append(("err", type(exc).__name__))
            assert (sm.index, dict(sm.readers), sm.truncated_lsn, sm.tso_limit) == before  # nothing changed
    return sm, results


@scaled(max_examples=150, deadline=None)
@given(st.lists(commands, max_size=30))
def test_updates_are_deterministic_and_snapshots_round_trip(cmds):
    a, ra = apply_all(cmds)
    b, rb = apply_all(cmds)
    assert ra == rb
    buf = io.BytesIO()
    idx = a.save_snapshot(buf)
    c = LogStateMachine()
    assert c.recover_from_snapshot(io.BytesIO(buf.getvalue())) == idx == a.index
    for q in ("truncated_lsn", "tso_limit", "readers", "min_reader_lsn", "index"):
        assert c.lookup(q) == a.lookup(q) == b.lookup(q)


def test_is_a_state_machine_and_refuses_bad_input():
    sm = LogStateMachine()
    assert isinstance(sm, StateMachine)
    sm.update(Entry(1, command("truncate", lsn=5, latest=9)))
    with pytest.raises(InvalidTruncateLsn):
        sm.update(Entry(2, command("truncate", lsn=5, latest=9)))
    with pytest.raises(InvalidArgument):
        sm.update(Entry(2, b"\xff"))
    with pytest.raises(InvalidArgument):
        sm.lookup("nothing")
    buf = io.BytesIO()
    sm.save_snapshot(buf)
    raw = bytearray(buf.getvalue())
    raw[10] ^= 1
    with pytest.raises(CorruptionError):
        LogStateMachine().recover_from_snapshot(io.BytesIO(bytes(raw)))
    with pytest.raises(CorruptionError):
        LogStateMachine().recover_from_snapshot(io.BytesIO(b"short"))
    sm.close()
    with pytest.raises(LogtideError):
        sm.update(Entry(3, command("reserve_tso", limit=9)))
