"""_ext/call_slots.pyx (the pipeline client's queue and waiting callers in C) against a simple model:
the frames a sender takes are the model's call frames in call order, split at the batch limit;
every caller gets exactly the reply (or error object) delivered for its id, whatever the order and
batching of the replies; a deadline ends a call with None and its late reply is dropped; a failure
ends every call in flight, and the slots refuse new calls."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide._ext.call_slots import CallSlots
from logtide.engine.rpc.call_frames import MalformedFrames, pack_call, pack_reply, unpack_calls
from logtide.errors import RpcStreamBroken

pytestmark = pytest.mark.timeout(120)


class ErrorReply:
    """Stands in for a PipelinedReply: anything with an .id is delivered as it is."""

    def __init__(self, id):
        self.id = id


def _start(slots: CallSlots, m: int, data: bytes, timeout: float, results: dict, k: int) -> threading.Thread:
    """A caller thread; returns once its frame is queued (so ids follow the start order)."""
    before = slots.pending + slots.calls
    th = threading.Thread(target=lambda: results.__setitem__(k, slots.call(m, data, timeout)), daemon=True)
    th.start()
    end = time.monotonic() + 10
    while slots.pending + slots.calls == before:
        assert time.monotonic() < end
        time.sleep(0.0005)
    return th


def _answering_sender(slots: CallSlots, stop: threading.Event, reply: bytes | None = None) -> threading.Thread:
    """A started thread that answers every batch it takes until `stop`: each call with `reply`, or
    with its own request when reply is None."""
    def sender():
        while not stop.is_set():
            blob = slots.take(0.05)
            if blob:
                slots.deliver(b"".join(pack_reply(i, req if reply is None else reply)
                                       for i, _, req in unpack_calls(blob)))
    snd = threading.Thread(target=sender, daemon=True)
    snd.start()
    return snd


def _model_batches(frames: list[bytes], limit: int) -> list[bytes]:
    out, cur = [], b""
    for f in frames:
        if cur and len(cur) + len(f) > limit:
            out.append(cur)
            cur = b""
        cur += f
    if cur:
        out.append(cur)
    return out


@scaled(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=60)), min_size=1, max_size=10),
       st.integers(1, 200), st.randoms(use_true_random=False))
def test_calls_batches_and_replies_match_the_model(calls, limit, rnd):
    slots = CallSlots(0.001, 0.01, limit)
    results: dict = {}
    ths = [_start(slots, m, d, 20.0, results, k) for k, (m, d) in enumerate(calls)]
    frames = [pack_call(k + 1, m, d) for k, (m, d) in enumerate(calls)]
    got = []
    while sum(len(unpack_calls(b)) for b in got) < len(calls):
        blob = slots.take(5.0)
        assert blob, "the sender got nothing although calls were queued"
        got.append(blob)
    assert got == _model_batches(frames, limit)
    assert slots.take(0.0) == b"" and slots.batches == len(got) and slots.calls == len(calls)
    # replies in a random order and random chunks; some calls answered with an error object, plus
    # replies for ids nobody waits for (dropped)
    answers = {}
    for k in range(len(calls)):
        answers[k + 1] = ErrorReply(k + 1) if rnd.random() < 0.25 else b"reply-%d-" % (k + 1) + calls[k][1]
    order = list(answers)
    rnd.shuffle(order)
    settled = 0
    while order:
        n = rnd.randint(1, 4)
        chunk, order = order[:n], order[n:]
        frames_blob = b"".join(pack_reply(i, answers[i]) for i in chunk if isinstance(answers[i], bytes))
        frames_blob += pack_reply(10_000 + len(order), b"nobody")
        errors = [answers[i] for i in chunk if not isinstance(answers[i], bytes)] + [ErrorReply(20_000)]
        settled += slots.deliver(frames_blob, errors)
    for th in ths:
        th.join(10)
        assert not th.is_alive()
    assert settled == len(calls) and slots.inflight == 0
    for k in range(len(calls)):
        assert results[k] is answers[k + 1] or results[k] == answers[k + 1]


def test_a_malformed_reply_blob_settles_nobody():
    slots = CallSlots()
    results: dict = {}
    th = _start(slots, 0, b"x", 0.3, results, 0)
    good = pack_reply(1, b"ok")
    for bad in (good[:-1], good + b"\x01", good[:5]):
        with pytest.raises(MalformedFrames):
            slots.deliver(bad)
    th.join(5)
    assert results[0] is None                     # nobody settled it: its deadline passed
    assert slots.deliver(good) == 0 and slots.inflight == 0   # the late reply is dropped


def test_deadline_then_other_calls_go_on():
    slots = CallSlots()
    results: dict = {}
    t0 = time.monotonic()
    a = _start(slots, 0, b"slow", 0.2, results, 0)
    b = _start(slots, 0, b"fast", 10.0, results, 1)
    assert slots.take(1.0) == pack_call(1, 0, b"slow") + pack_call(2, 0, b"fast")
    a.join(5)
    assert results[0] is None and 0.19 < time.monotonic() - t0 < 5
    assert slots.deliver(pack_reply(1, b"late") + pack_reply(2, b"B")) == 1
    b.join(5)
    assert results[1] == b"B"


def test_failure_ends_every_call_and_refuses_new_ones():
    slots = CallSlots()
    results: dict = {}
    ths = [_start(slots, 0, b"%d" % k, 30.0, results, k) for k in range(5)]
    slots.take(1.0)                                # three in flight, two more still queued
    ths += [_start(slots, 1, b"q%d" % k, 30.0, results, 5 + k) for k in range(2)]
    boom = RpcStreamBroken("gone")
    t0 = time.monotonic()
    slots.fail(boom)
    for th in ths:
        th.join(5)
        assert not th.is_alive()
    assert time.monotonic() - t0 < 2
    assert all(results[k] is boom for k in range(7))
    assert slots.failure is boom and slots.inflight == 0 and slots.pending == 0
    assert slots.call(0, b"after", 5.0) is False   # refused, not queued: the caller opens a new stream
    assert slots.take(1.0) is None
    slots.fail(RpcStreamBroken("second"))         # the first failure sticks
    assert slots.failure is boom


def test_batch_waits_for_the_returning_callers_then_goes():
    """After a batch of replies the next batch waits (up to the linger) for the callers that got them."""
    slots = CallSlots(0.05, 0.5, 1 << 20)
    stop = threading.Event()
    per_thread = {}

    def caller(t):
        n = 0
        while not stop.is_set():
            r = slots.call(0, b"t%d" % t, 10.0)
            assert r == b"r"
            n += 1
        per_thread[t] = n

    ths = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(8)]
    for th in ths:
        th.start()
    sizes = []
    for _ in range(30):
        blob = slots.take(5.0)
        ids = [cid for cid, _, _ in unpack_calls(blob)]
        sizes.append(len(ids))
        if len(sizes) == 30:              # the last batch: its callers then leave
            stop.set()
        slots.deliver(b"".join(pack_reply(i, b"r") for i in ids))
    # the remaining calls after stop: answer until every caller left
    end = time.monotonic() + 10
    while any(th.is_alive() for th in ths):
        assert time.monotonic() < end
        blob = slots.take(0.1)
        if blob:
            slots.deliver(b"".join(pack_reply(i, b"r") for i, _, _ in unpack_calls(blob)))
    # once the callers are all in flight, each batch carries all eight of them
    assert sizes[5:30].count(8) >= 20, sizes


def test_one_delivery_wakes_every_caller_of_the_batch_even_those_that_do_not_call_again():
    """A REPLIES frame wakes all of its callers at once: none waits for another to call again (a
    caller that goes on to other work holds nobody up), and the sender does nothing more."""
    slots = CallSlots(0.001, 0.01, 1 << 20)
    results: dict = {}
    ths = [_start(slots, 0, b"c%d" % k, 20.0, results, k) for k in range(16)]
    got = []
    while sum(len(unpack_calls(b)) for b in got) < 16:
        got.append(slots.take(5.0))
    ids = [cid for b in got for cid, _, _ in unpack_calls(b)]
    assert slots.deliver(b"".join(pack_reply(i, b"r%d" % i) for i in ids)) == 16
    for th in ths:
        th.join(5)
        assert not th.is_alive()
    assert sorted(results.values()) == sorted(b"r%d" % i for i in ids)
    assert slots.inflight == 0


def test_woken_callers_leave_the_gil_queue_even_when_their_threads_end():
    """Callers woken together queue for the GIL (the count that shortens their spin); each leaves
    it once back in Python, so the count is 0 after every round, also when the threads end right
    after their last call, and after a call that ends at its deadline."""
    from logtide._ext.call_slots import gil_queue
    slots = CallSlots(0.0005, 0.005, 1 << 20)
    stop = threading.Event()
    snd = _answering_sender(slots, stop, b"r")
    try:
        for _ in range(3):
            replies = []
            ths = [threading.Thread(target=lambda: replies.extend(slots.call(0, b"q", 10.0) for _ in range(200)))
                   for _ in range(16)]
            for th in ths:
                th.start()
            for th in ths:
                th.join(30)
                assert not th.is_alive()
            assert replies == [b"r"] * 3200
            assert gil_queue() == 0
    finally:
        stop.set()
        snd.join(5)
    assert slots.call(0, b"late", 0.002) is None   # nobody answers now: the deadline ends it, leaking nothing
    assert gil_queue() == 0


def test_a_gate_claim_left_by_a_caller_that_never_calls_again_is_taken_over():
    """Woken callers are patient at the GIL gate: they yield and wait their turn into Python. A
    caller that gets its reply and then stays in Python without calling again must not hold the
    others up for good: its claim goes stale and is taken over, and every call gets its own reply."""
    slots = CallSlots(0.0005, 0.005, 1 << 20)
    stop = threading.Event()
    snd = _answering_sender(slots, stop)
    start = threading.Barrier(6)
    got, lock = [], threading.Lock()

    def leaver():
        start.wait()
        r = slots.call(0, b"leaver", 10.0)
        with lock:
            got.append(r)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:     # Python, and no wait: its claim of the gate goes stale
            pass

    def caller(t):
        start.wait()
        for k in range(40):
            r = slots.call(0, b"c%d.%d" % (t, k), 10.0)
            with lock:
                got.append(r)
    ths = [threading.Thread(target=leaver)] + [threading.Thread(target=caller, args=(t,)) for t in range(5)]
    try:
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert not any(th.is_alive() for th in ths), "a woken caller waited for good on a stale claim"
    finally:
        stop.set()
        snd.join(5)
    assert sorted(got) == sorted([b"leaver"] + [b"c%d.%d" % (t, k) for t in range(5) for k in range(40)])


@scaled(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_replies_racing_deadlines_give_the_reply_or_none_and_never_hang(seed):
    """Callers with deadlines of 1-4 ms against a sender whose replies come 0-5 ms late: every call
    ends with its own reply or None (its deadline passed first), a reply lands only on its own
    caller, and the slots end with nothing in flight."""
    import random
    rnd = random.Random(seed)
    slots = CallSlots(0.0005, 0.002, 1 << 20)
    out: dict = {}
    lock = threading.Lock()

    def caller(t):
        r = random.Random(seed * 31 + t)
        for k in range(40):
            req = b"%d:%d" % (t, k)
            res = slots.call(t % 4, req, r.uniform(0.001, 0.004))
            with lock:
                out[req] = res

    ths = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(6)]
    for th in ths:
        th.start()
    end = time.monotonic() + 60
    while any(th.is_alive() for th in ths):
        assert time.monotonic() < end, "a caller hung"
        blob = slots.take(0.01)
        if not blob:
            continue
        time.sleep(rnd.uniform(0, 0.005))
        slots.deliver(b"".join(pack_reply(cid, b"re:" + d) for cid, _, d in unpack_calls(blob)))
    assert len(out) == 6 * 40
    assert all(v is None or v == b"re:" + k for k, v in out.items())
    assert slots.inflight == 0


def _poll_sender(slots: CallSlots, n_calls: int, deadline: float = 10.0) -> list[bytes]:
    """The event-loop sender's protocol: poll(); on a wait, sleep until the notify eventfd is
    readable or the wait passed (select here, the CallLoop in the client)."""
    import select
    efd = slots.open_notify()
    got: list[bytes] = []
    end = time.monotonic() + deadline
    while sum(len(unpack_calls(b)) for b in got) < n_calls:
        assert time.monotonic() < end, "the sender got nothing although calls were queued"
        r = slots.poll()
        if r.__class__ is bytes:
            got.append(r)
            continue
        assert r is not None and isinstance(r, float)
        readable, _, _ = select.select([efd], [], [], r if r >= 0 else 1.0)
        if readable:
            slots.drain_notify()
    return got


@scaled(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=60)), min_size=1, max_size=10),
       st.integers(1, 200))
def test_poll_with_the_notify_eventfd_takes_the_same_batches_as_take(calls, limit):
    slots = CallSlots(0.001, 0.01, limit)
    slots.open_notify()
    assert slots.poll() == -1.0                   # idle: wait for the eventfd only
    results: dict = {}
    ths = [_start(slots, m, d, 20.0, results, k) for k, (m, d) in enumerate(calls)]
    frames = [pack_call(k + 1, m, d) for k, (m, d) in enumerate(calls)]
    assert _poll_sender(slots, len(calls)) == _model_batches(frames, limit)
    assert slots.deliver(b"".join(pack_reply(k + 1, b"r%d" % k) for k in range(len(calls)))) == len(calls)
    for th in ths:
        th.join(10)
        assert not th.is_alive()
    assert [results[k] for k in range(len(calls))] == [b"r%d" % k for k in range(len(calls))]


def test_a_call_on_idle_slots_makes_the_notify_eventfd_readable():
    import select
    slots = CallSlots()
    efd = slots.open_notify()
    assert slots.open_notify() == efd             # one eventfd per slots
    assert slots.poll() == -1.0
    assert select.select([efd], [], [], 0)[0] == []
    results: dict = {}
    th = _start(slots, 2, b"hello", 10.0, results, 0)
    assert select.select([efd], [], [], 5.0)[0] == [efd]
    slots.drain_notify()
    assert select.select([efd], [], [], 0)[0] == []
    assert slots.poll() == pack_call(1, 2, b"hello")
    slots.deliver(pack_reply(1, b"world"))
    th.join(5)
    assert results[0] == b"world"
    slots.fail(RpcStreamBroken("gone"))
    assert slots.poll() is None                   # failed: the loop tears the stream down


def test_poll_waits_the_linger_for_returning_callers():
    """After replies, poll() gives the time left of the linger while a caller that got one has not
    called again, and the eventfd turns readable once it did: then both calls go in one batch."""
    import select
    slots = CallSlots(0.5, 2.0, 1 << 20)
    efd = slots.open_notify()
    results: dict = {}
    second_go = threading.Event()

    def caller(k):
        results[k] = slots.call(0, b"a%d" % k, 10.0)
        if k == 1:
            second_go.wait(10)
        results[k + 10] = slots.call(0, b"b%d" % k, 10.0)

    ths = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(2)]
    for th in ths:
        th.start()
    first = _poll_sender(slots, 2)
    ids = [cid for b in first for cid, _, _ in unpack_calls(b)]
    slots.deliver(b"".join(pack_reply(i, b"r") for i in ids))
    end = time.monotonic() + 5
    while slots.pending < 1:                   # caller 0 called again; caller 1 has not
        assert time.monotonic() < end
        time.sleep(0.001)
    slots.drain_notify()
    w = slots.poll()
    assert w.__class__ is float and 0 < w <= 0.5, w
    assert select.select([efd], [], [], 0)[0] == []
    second_go.set()
    assert select.select([efd], [], [], 5.0)[0] == [efd]   # the last returning caller called
    second = slots.poll()
    assert sorted(d for _, _, d in unpack_calls(second)) == [b"b0", b"b1"]
    slots.deliver(b"".join(pack_reply(cid, b"s") for cid, _, _ in unpack_calls(second)))
    for th in ths:
        th.join(5)
    assert results[10] == results[11] == b"s"
