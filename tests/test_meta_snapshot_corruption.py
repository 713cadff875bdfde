"""Meta snapshots: round trip, and every damaged byte is refused with CorruptionError."""
import io

import pytest

from logtide.engine.meta import MetaStateMachine
from logtide.engine.meta.command import MetaSpec, UpsertCmd
from logtide.engine.meta.log_entry import decode_entry, encode_entry
from logtide.errors import CorruptionError

from meta_clock import T0


def _machine():
    sm = MetaStateMachine()
    sm.apply(1, T0, UpsertCmd("a", b"hello"))
    sm.apply(2, T0 + 1, UpsertCmd("b/\u00e9", b"", spec=MetaSpec(ttl_ms=500)))
    sm.apply(3, T0 + 2, UpsertCmd("c", b"\x00\xff" * 10, spec=MetaSpec(expire_at=T0 + 9000)))
    return sm


def _snap(sm):
    buf = io.BytesIO()
    sm.save_snapshot(buf)
    return buf.getvalue()


def test_round_trip_keeps_state_seq_time_and_expiry_index():
    sm = _machine()
    raw = _snap(sm)
    r = MetaStateMachine()
    assert r.recover_from_snapshot(io.BytesIO(raw)) == 3
    assert r.items() == sm.items() and r.seq == 3 and r.last_time_ms == T0 + 2
    # the expiry index came back too: the ttl key goes at the next entry past its expiry
    seen = []
    r.subscribe(seen.extend)
    r.apply(4, T0 + 600, UpsertCmd("z", b"1"))
    assert seen[0][0] == "b/\u00e9" and seen[0][2] is None


def test_empty_machine_snapshot():
    r = MetaStateMachine()
    assert r.recover_from_snapshot(io.BytesIO(_snap(MetaStateMachine()))) == 0
    assert r.items() == []


def test_every_flipped_byte_is_detected():
    raw = _snap(_machine())
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x41
        r = MetaStateMachine()
        with pytest.raises(CorruptionError):
            r.recover_from_snapshot(io.BytesIO(bytes(bad)))
        assert r.items() == []          # a refused snapshot leaves the machine untouched


@pytest.mark.parametrize("cut", [0, 1, 10, 44, 60, -5, -4, -1])
def test_truncated_snapshot_is_refused(cut):
    raw = _snap(_machine())
    with pytest.raises(CorruptionError):
        MetaStateMachine().recover_from_snapshot(io.BytesIO(raw[:cut]))


@pytest.mark.parametrize("payload", [
    b"", b"\xff\xfe", b"[]", b"{}", b'{"v":1,"t":5}', b'{"v":2,"t":5,"c":{"upsert":{}}}',
    b'{"v":1,"t":-1,"c":{"upsert":{"key":"k","value":"delete"}}}',
    b'{"v":1,"t":1,"c":{"upsert":{"key":"k","value":{"update":"!!"}}}}',
    b'{"v":1,"t":1,"c":{"txn":{"conditions":[{"key":"k","target":"seq","op":"~","arg":1}]}}}',
    b'{"v":1,"t":1,"c":{"drop":{}}}',
    b"[" * 100000,
])
def test_damaged_log_entries_raise_corruption(payload):
    with pytest.raises(CorruptionError):
        decode_entry(payload)


def test_log_entry_is_canonical_json():
    raw = encode_entry(T0, UpsertCmd("k", b"\x00v"))
    assert raw == (b'{"c":{"upsert":{"key":"k","match_seq":null,"spec":null,"value":{"update":"AHY="}}},'
                   b'"t":1700000000000,"v":1}')
