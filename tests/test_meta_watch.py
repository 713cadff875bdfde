"""Watch: key ranges, filters, initial flush + marker, event order, expiry events, no empty events."""
import threading

import pytest

from logtide.engine.meta import DELETE, FLUSH_MARKER, MetaService, cond, op
from logtide.errors import MetaClosedError

from meta_clock import ManualClock



@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def ms(clock):
    with MetaService.in_memory(clock=clock) as s:
        yield s


def _evs(w):
    return [(e.key, e.prev.data if e.prev else None, e.current.data if e.current else None) for e in w.drain()]


def test_range_and_event_order(ms):
    w = ms.watch("b", "d")
    ms.upsert("a", b"1")
    ms.upsert("b", b"1")
    ms.upsert("c", b"1")
    ms.upsert("d", b"1")          # key_end is exclusive
    ms.upsert("b", b"2")
    ms.upsert("c", DELETE)
    assert _evs(w) == [("b", None, b"1"), ("c", None, b"1"), ("b", b"1", b"2"), ("c", b"1", None)]


def test_single_key_watch(ms):
    w = ms.watch("k")
    ms.upsert("k", b"1")
    ms.upsert("k2", b"1")
    ms.upsert("j", b"1")
    assert _evs(w) == [("k", None, b"1")]


def test_filters(ms):
    from logtide.engine.meta import ALL, UPDATE
    wu = ms.watch("a", "z", filter=UPDATE)
    wd = ms.watch("a", "z", filter=DELETE)         # the DELETE sentinel names the delete filter
    wa = ms.watch("a", "z", filter=ALL)
    ws = ms.watch("a", "z", filter="Delete")       # and the strings work, any case
    ms.upsert("k", b"1")
    ms.upsert("k", b"2")
    ms.upsert("k", DELETE)
    assert _evs(wu) == [("k", None, b"1"), ("k", b"1", b"2")]
    assert _evs(wd) == [("k", b"2", None)]
    assert _evs(ws) == [("k", b"2", None)]
    assert len(_evs(wa)) == 3


def test_events_unpack_as_key_prev_current(ms):
    w = ms.watch("k")
    ms.upsert("k", b"1")
    key, prev, cur = w.get(timeout=1)
    assert (key, prev, cur.data) == ("k", None, b"1")


def test_no_event_when_nothing_changed(ms):
    from logtide.engine.meta import AS_IS, Exact
    w = ms.watch("", "\U0010ffff")
    ms.upsert("k", b"1")
    w.drain()
    ms.upsert("k", b"2", match_seq=Exact(0))      # failed match
    ms.upsert("gone", DELETE)                      # delete of a missing key
    ms.upsert("gone", AS_IS, ttl_ms=5)             # as_is on a missing key
    ms.txn(conditions=[cond.seq("k", "==", 0)], if_then=[op.put("x", b"1")], else_then=[op.get("k")])
    ms.txn(if_then=[op.delete_by_prefix("nothing/"), op.delete("gone"), op.fetch_add_u64("k", 1, match_seq=7)])
    assert _evs(w) == []


def test_txn_events_in_op_order(ms):
    ms.upsert("p/1", b"a")
    ms.upsert("p/2", b"b")
    w = ms.watch("", "\U0010ffff")
    ms.txn(if_then=[op.put("z", b"1"), op.delete_by_prefix("p/"), op.fetch_add_u64("c", 2),
                    op.put_sequential("q/", "s", b"v")])
    assert _evs(w) == [("z", None, b"1"), ("p/1", b"a", None), ("p/2", b"b", None), ("c", None, b"2"),
                       ("s", None, b"1"), ("q/" + "0" * 20, None, b"v")]


def test_expiry_events_come_first_in_expiry_seq_order(ms, clock):
    ms.upsert("b", b"1", ttl_ms=100)
    ms.upsert("a", b"1", ttl_ms=50)
    ms.upsert("c", b"1", ttl_ms=50)
    w = ms.watch("a", "z")
    clock.t += 1000
    ms.upsert("y", b"new")
    assert _evs(w) == [("a", b"1", None), ("c", b"1", None), ("b", b"1", None), ("y", None, b"new")]


def test_initial_flush_then_marker_then_live_events(ms, clock):
    ms.upsert("a", b"1")
    ms.upsert("b", b"1")
    ms.upsert("b2", b"1", ttl_ms=10)
    ms.upsert("c", b"1")
    clock.t += 100                  # b2 has expired at local time: not flushed
    w = ms.watch("b", "c", initial_flush=True)
    ms.upsert("b", b"2")
    evs = w.drain()
    # the next write first removes b2 (expired at its log time): that removal is an event too
    assert [(e.key, e.is_initialization) for e in evs] == [("b", True), (None, True), ("b2", False),
                                                            ("b", False)]
    assert evs[1] == FLUSH_MARKER and evs[1].is_flush_marker
    assert evs[0].prev is None and evs[0].current.data == b"1"
    assert evs[2].prev.data == b"1" and evs[2].current is None
    assert evs[3].prev.data == b"1" and evs[3].current.data == b"2"


def test_initial_flush_of_an_empty_range_sends_only_the_marker(ms):
    w = ms.watch("x", "y", initial_flush=True)
    assert w.drain() == [FLUSH_MARKER]


def test_iteration_blocks_until_events_and_stops_on_close(ms):
    w = ms.watch("a", "z")
    got = []

    def consume():
        for ev in w:
            got.append(ev.key)
    t = threading.Thread(target=consume)
    t.start()
    for k in ["a", "b", "c"]:
        ms.upsert(k, b"1")
    for _ in range(200):
        if len(got) == 3:
            break
        threading.Event().wait(0.01)
    w.close()
    t.join(5)
    assert not t.is_alive() and got == ["a", "b", "c"]
    with pytest.raises(MetaClosedError):
        w.get(timeout=0.1)


def test_closed_watcher_gets_no_more_events_and_service_close_ends_watches(ms):
    w1 = ms.watch("a", "z")
    w2 = ms.watch("a", "z")
    w1.close()
    ms.upsert("k", b"1")
    assert w1.drain() == []
    ms.close()
    assert [e.key for e in w2.drain()] == ["k"]
    assert w2.closed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("durable", [False, True])
def test_watch_order_is_apply_order_under_concurrent_writers(tmp_path, durable):
    if durable:
        svc = MetaService.open(tmp_path / "m")
    else:
        svc = MetaService.in_memory()
    with svc:
        w = svc.watch("", "\U0010ffff")
        errors = []

        def writer(i):
            try:
                for j in range(50):
                    svc.upsert(f"w{i}/{j % 5}", b"%d" % j)
                    if j % 10 == 0:
                        svc.txn(if_then=[op.delete_by_prefix(f"w{i}/")])
            except Exception as exc:  # surfaced below
                errors.append(exc)
        ts = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        evs = w.drain()
        seqs = [e.current.seq for e in evs if e.current is not None]
        assert seqs == sorted(seqs) and len(seqs) == 400 == svc.seq     # every write, in seq order
        # replaying the events over an empty dict gives the service's state
        state = {}
        for e in evs:
            assert state.get(e.key) == e.prev
            if e.current is None:
                del state[e.key]
            else:
                state[e.key] = e.current
        assert sorted(state.items()) == svc.list("")
