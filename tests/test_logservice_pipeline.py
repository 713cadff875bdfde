"""The log service's batched Append (what the call pipeline runs for a batch of concurrent appends:
LogServiceServicer.frames_Append, its requests decoded and its replies packed in C) against a simple
model: each request appended on its own. Same records, same errors, each call its own LSN; a request
that does not parse gets InvalidRequest and disturbs nobody."""
from __future__ import annotations

import tempfile
import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide import LogService
from logtide.engine.logservice import logservice_pb2 as pb
from logtide.engine.logservice.rpc_service import LogServiceServicer
from logtide.engine.logservice.record import LogRecord
from logtide.engine.rpc.call_frames import unpack_replies
from logtide.errors import InvalidRequest, LogtideError

MAX_RECORD = 200

request = st.one_of(
    # the common case: one payload, any replica id and type (the last replica id is out of range)
    st.builds(lambda p, r, t: pb.AppendRequest(payloads=[p], replica_id=r, type=t),
              st.binary(max_size=MAX_RECORD), st.sampled_from([0, 1, 7, (1 << 64) - 1]),
              st.sampled_from([0, 1, 5])),
    st.builds(lambda ps, r: pb.AppendRequest(payloads=ps, replica_id=r),
              st.lists(st.binary(max_size=50), min_size=2, max_size=4), st.sampled_from([0, 3])),
    st.builds(lambda d, t: pb.AppendRequest(payloads=[d], type=t, raw=True),
              st.binary(max_size=MAX_RECORD + 20), st.sampled_from([0, 9])),
    st.just(pb.AppendRequest(raw=True)),                        # a raw append without its record
    st.just(b"\x0a\x05ab"),                                     # bytes that do not parse
)


def _records(svc: LogService) -> dict[int, LogRecord]:
    latest = svc.get_latest_lsn()
    return {r.lsn: r for r in svc.read(1, 1 << 30)[0]} if latest else {}


def _expected(req: pb.AppendRequest) -> list[tuple[int, bytes]]:
    """The (type, data) of the records one request appends."""
    if req.raw:
        return [(req.type, req.payloads[0])]
    return [(req.type, LogRecord.user(p, req.replica_id).data) for p in req.payloads]


def _frames_answer(svc: LogService, ids: list, datas: list, deferred: bool):
    """(reply frames, failed) of a batch, from frames_Append or from defer_frames_Append's `done`."""
    servicer = LogServiceServicer(svc, 1 << 20)
    if not deferred:
        return servicer.frames_Append(ids, datas, None)
    got, answered = [], threading.Event()

    def done(frames, failed):
        got.append((frames, failed))
        answered.set()
    try:
        servicer.defer_frames_Append(ids, datas, None, done)
        assert answered.wait(30), "defer_frames_Append never answered"
    finally:
        servicer.close()
    assert len(got) == 1
    return got[0]


@scaled(max_examples=60, deadline=None)
@given(st.lists(request, min_size=1, max_size=12), st.booleans())
def test_batched_append_matches_appending_one_by_one(reqs, deferred):
    """frames_Append (a worker waits for the group) and defer_frames_Append (queued on the committer,
    answered by the durability watcher) alike."""
    with tempfile.TemporaryDirectory() as d:
        model = LogService.open(f"{d}/model", fsync="never", max_record_size=MAX_RECORD)
        fast = LogService.open(f"{d}/fast", fsync="always" if deferred else "never", max_record_size=MAX_RECORD)
        try:
            model_servicer = LogServiceServicer(model, 1 << 20)
            want = []
            for r in reqs:
                if isinstance(r, bytes):
                    want.append(InvalidRequest("malformed"))
                    continue
                try:
                    want.append(model_servicer.Append(r, None).first_lsn)
                except LogtideError as exc:
                    want.append(exc)
            ids = [1000 + 7 * k for k in range(len(reqs))]
            frames, failed = _frames_answer(fast, ids, [r if isinstance(r, bytes) else r.SerializeToString()
                                                        for r in reqs], deferred)
            by_id = {i: pb.AppendResponse.FromString(d) for i, d in unpack_replies(frames)}
            by_id.update(failed)
            assert sorted(by_id) == ids and len(by_id) == len(reqs) == len(unpack_replies(frames)) + len(failed)
            got = [by_id[i] for i in ids]
            records = _records(fast)
            seen = set()
            for r, w, g in zip(reqs, want, got):
                if isinstance(w, Exception):    # the same typed error, and nothing appended for it
                    assert type(g) is type(w), (r, g, w)
                    continue
                assert isinstance(g, pb.AppendResponse), (r, g)
                for k, (t, data) in enumerate(_expected(r)):
                    rec = records[g.first_lsn + k]
                    assert (rec.type, rec.data) == (t, data)
                    seen.add(g.first_lsn + k)
            # exactly the acknowledged records, and as many as the model holds
            assert seen == set(records) and len(records) == model.get_latest_lsn()
        finally:
            model.close()
            fast.close()


def test_queued_groups_are_answered_once_durable_and_at_close(tmp_path):
    """LogService.queue_group + when_durable: each callback comes once its records are durable
    (readable), in registration order; one registered just before close() is answered by the
    close's drain, and its records survive a reopen."""
    svc = LogService.open(tmp_path / "log", fsync="always")
    got: list = []
    answered = threading.Event()
    first = svc.queue_group([b"a", b"b"], [0, 3])
    second = svc.queue_group([b"c"], [7])

    def seen(tag):
        def callback(err):
            got.append((tag, err, svc.get_latest_lsn()))
            if tag == "second":
                answered.set()
        return callback
    svc.when_durable(first[-1], seen("first"))
    svc.when_durable(second[-1], seen("second"))
    assert answered.wait(30)
    assert [(t, e) for t, e, _ in got] == [("first", None), ("second", None)]
    assert got[0][2] >= first[-1] and got[1][2] >= second[-1]
    assert first == [1, 2] and second == [3]
    last = svc.queue_group([b"d"], [0])
    at_close: list = []
    svc.when_durable(last[-1], at_close.append)
    svc.close()
    assert at_close == [None]
    with LogService.open(tmp_path / "log", fsync="always") as again:
        recs = again.read(1, 1 << 20)[0]
        assert [r.data for r in recs] == [LogRecord.user(p, rid).data
                                          for p, rid in [(b"a", 0), (b"b", 3), (b"c", 7), (b"d", 0)]]


def _loop_thread():
    """A running uvloop (the framed carrier's kind) on its own thread; call(fn) runs fn on it."""
    import asyncio
    import uvloop
    loop = uvloop.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()

    def call(fn):
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), loop).result(30)
    return loop, th, call


def test_loop_durability_follows_the_queue(tmp_path):
    """LoopDurability over a bare CommitQueue, published and failed by hand: each callback runs on
    the loop, in registration order, exactly when its LSN is published; one already published is
    answered at once; a failure answers the rest with LogServiceFailed; close answers what is left."""
    from logtide._ext.commit_queue import CommitQueue
    from logtide.engine.logservice.loop_durability import LoopDurability
    loop, th, call = _loop_thread()
    try:
        q = CommitQueue(1)
        for p in (b"a", b"b", b"c", b"d"):
            q.enqueue_one(0, b"", p)
        got: list = []
        notices = call(lambda: LoopDurability(q, loop))

        def cb(tag):
            return lambda err: got.append((tag, err, threading.get_ident() == th.ident))

        def settle(n):
            end = time.monotonic() + 30
            while len(got) < n and time.monotonic() < end:
                time.sleep(0.001)
            time.sleep(0.02)                     # nothing more comes
            return [(t, type(e).__name__ if e else None, on_loop) for t, e, on_loop in got]
        call(lambda: (notices.watch(1, cb("1")), notices.watch(3, cb("3")), notices.watch(2, cb("2"))))
        assert settle(0) == []
        q.publish(1)                             # from this thread, as the flusher would
        assert settle(1) == [("1", None, True)]
        q.publish(2)                             # "3" is first in line and not due: "2" waits behind it
        assert settle(1) == [("1", None, True)]
        q.publish(3)
        assert settle(3) == [("1", None, True), ("3", None, True), ("2", None, True)]
        call(lambda: notices.watch(2, cb("2 again")))   # already published: answered at once
        assert got[-1][0] == "2 again" and got[-1][1] is None
        call(lambda: (notices.watch(4, lambda err: 1 / 0), notices.watch(4, cb("4"))))
        q.fail(OSError(5, "EIO"))
        assert settle(5)[-1] == ("4", "LogServiceFailed", True)
        q2 = CommitQueue(1)
        q2.enqueue_one(0, b"", b"x")
        other = call(lambda: LoopDurability(q2, loop))
        def raising(err):
            raise ValueError("a caller's bug")
        call(lambda: (other.watch(1, raising), other.watch(1, cb("closed"))))
        call(other.close)                        # the bug is logged; the next callback still runs
        assert got[-1][0] == "closed" and isinstance(got[-1][1], RuntimeError)
        q2.publish(1)                            # disarmed: its eventfd is closed and never written
        call(notices.close)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(30)


def test_queued_groups_on_an_event_loop_are_answered_on_the_loop(tmp_path):
    """when_durable with the running loop (what the framed server passes): the callbacks run on the
    loop, woken by the flusher, with no durability-watcher thread; one registered just before
    close() is answered by the close's drain, and the records survive a reopen."""
    svc = LogService.open(tmp_path / "log", fsync="always")
    loop, th, call = _loop_thread()
    try:
        got: list = []
        done = threading.Event()

        def register(payloads, tag):
            lsns = svc.queue_group(payloads, [0] * len(payloads))

            def callback(err):
                readable = tag == "at close" or svc.get_latest_lsn() >= lsns[-1]   # (closed: not asked)
                got.append((tag, err, threading.get_ident() == th.ident, readable))
                if tag == "third":
                    done.set()
            svc.when_durable(lsns[-1], callback, loop)
            return lsns
        assert call(lambda: register([b"a", b"b"], "first")) == [1, 2]
        assert call(lambda: register([b"c"], "second")) == [3]
        assert call(lambda: register([b"d", b"e", b"f"], "third")) == [4, 5, 6]
        assert done.wait(30)
        assert got == [("first", None, True, True), ("second", None, True, True), ("third", None, True, True)]
        assert not [t.name for t in threading.enumerate() if t.name == "logservice-durability"]
        call(lambda: register([b"g"], "at close"))
        svc.close()
        assert got[-1] == ("at close", None, True, True)
    finally:
        svc.close()
        loop.call_soon_threadsafe(loop.stop)
        th.join(30)
    with LogService.open(tmp_path / "log", fsync="always") as again:
        assert [r.data for r in again.read(1, 1 << 20)[0]] == [LogRecord.user(bytes([p]), 0).data for p in b"abcdefg"]


def test_groups_queued_on_a_loop_are_written_by_the_loop_or_the_flusher(tmp_path):
    """queue_group with the running loop (the framed server's appends) beside threads appending
    on their own: the loop writes a group itself when the log is idle and leaves it to the flusher
    when it is not. Either way every callback runs on the loop once its records are readable, and
    the log holds every record exactly once, each at the LSN it was given."""
    svc = LogService.open(tmp_path / "log", fsync="always")
    loop, th, call = _loop_thread()
    expected: dict[int, bytes] = {}
    answers: list = []
    stop = threading.Event()

    def appender(k: int) -> None:
        i = 0
        while not stop.is_set():
            p = b"t%d-%d" % (k, i)
            expected[svc.append(p, replica_id=k)] = LogRecord.user(p, k).data
            i += 1
    threads = [threading.Thread(target=appender, args=(k,)) for k in (1, 2)]
    try:
        def register(batch: int) -> None:
            payloads = [b"loop-%d-%d" % (batch, j) for j in range(1 + batch % 5)]
            lsns = svc.queue_group(payloads, [0] * len(payloads), loop=loop)
            for lsn, p in zip(lsns, payloads):
                expected[lsn] = LogRecord.user(p, 0).data

            def callback(err):
                answers.append((err, threading.get_ident() == th.ident, svc.get_latest_lsn() >= lsns[-1]))
            svc.when_durable(lsns[-1], callback, loop)
        here0 = svc.stats()["loop_groups"]
        for batch in range(40):                  # the log idle: the loop writes each group itself
            call(lambda: register(batch))
            time.sleep(0.001)
        assert svc.stats()["loop_groups"] - here0 >= 20
        for t in threads:
            t.start()
        for batch in range(40, 400):             # now beside the appenders' groups
            call(lambda: (register(batch), register(batch + 1000)))
        stop.set()
        for t in threads:
            t.join(30)
        end = time.monotonic() + 30
        while len(answers) < 40 + 2 * 360 and time.monotonic() < end:
            time.sleep(0.005)
        assert len(answers) == 40 + 2 * 360
        assert set(answers) == {(None, True, True)}
    finally:
        stop.set()
        svc.close()
        loop.call_soon_threadsafe(loop.stop)
        th.join(30)
    with LogService.open(tmp_path / "log", fsync="always") as again:
        recs = again.read(1, 1 << 30)[0]
        assert {r.lsn: r.data for r in recs} == expected
        assert [r.lsn for r in recs] == list(range(1, len(expected) + 1))


def test_a_framed_server_commits_its_batches_on_its_loop(tmp_path):
    """Appends over the framed carrier from concurrent threads: the server's loop writes their
    groups itself (the log is otherwise idle), and each caller's LSN holds its record."""
    from logtide import connect_logservice
    from logtide.engine.logservice.rpc_service import LogServiceServer
    svc = LogService.open(tmp_path / "log", fsync="always")
    server = LogServiceServer(svc, "127.0.0.1:0", own_service=True)
    client = connect_logservice(f"127.0.0.1:{server.port}")
    got: dict[int, bytes] = {}
    try:
        def run(k: int) -> None:
            for i in range(50):
                p = b"%d-%d" % (k, i)
                got[client.append(p, replica_id=k)] = LogRecord.user(p, k).data
        threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == 400 and svc.stats()["loop_groups"] >= 1
        assert {r.lsn: r.data for r in svc.read(1, 1 << 30)[0]} == got
    finally:
        client.close()
        server.stop()
