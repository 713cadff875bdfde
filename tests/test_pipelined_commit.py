"""The pipelined committer (engine/group_commit/pipelined.py) on a real log service with fsync, driven by
many threads, against a serial model; and the log service's enqueue / wait_durable it relies on.

Checked: every item is published exactly once, in LSN order, which is the order the writers chose
under their lock; the log holds the records in that order; a writer returns only once its item is
published; a failed publication or a closed log fails that writer and everyone after it, with a
typed error, and the log keeps what was made durable.
"""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import LogService
from logtide.engine.group_commit import PipelinedCommitter
from logtide.errors import (GroupCommitFailed, InvalidArgument, LogServiceClosed, RecordTooLarge)


def _run_writers(log, writers: int, per_writer: int, fail_at: int | None):
    order_lock = threading.Lock()
    chosen: list[bytes] = []          # payloads in the order they were queued (the writers' lock order)
    published: list[tuple[int, bytes]] = []
    returned: list[tuple[bytes, bool]] = []   # (payload, was it published when its writer returned)
    errors: list[BaseException] = []

    def publish(items, lsns):
        assert lsns == sorted(lsns)
        for it, lsn in zip(items, lsns):
            if fail_at is not None and it == b"w%d" % fail_at:
                raise RuntimeError("publication failed")
            published.append((lsn, it))

    gc = PipelinedCommitter(log, publish)

    def writer(k):
        for i in range(per_writer):
            item = b"%d-%d" % (k, i) if fail_at is None or k * per_writer + i != fail_at else b"w%d" % fail_at
            try:
                with order_lock:
                    ticket = gc.enqueue(item, item)
                    chosen.append(item)
                gc.wait(ticket)
                returned.append((item, any(p == item for _, p in published)))
            except (GroupCommitFailed, RuntimeError) as exc:
                errors.append(exc)
                return
    ths = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    assert not any(th.is_alive() for th in ths)
    return gc, chosen, published, returned, errors


class OwnEnqueueLog(LogService):
    """A log service whose enqueue is its own: the committer calls it rather than framing records
    into the commit queue from C (_ext/pipelined_core.pyx)."""
    enqueued = 0

    def enqueue(self, payload, replica_id: int = 0) -> int:
        self.enqueued += 1
        return super().enqueue(payload, replica_id)


@pytest.mark.parametrize("log_cls", [LogService, OwnEnqueueLog], ids=["c-queue", "log-enqueue"])
@scaled(max_examples=12, deadline=None)
@given(writers=st.integers(1, 12), per_writer=st.integers(1, 30), fail=st.booleans(), data=st.data())
def test_pipelined_committer_matches_serial_model(tmp_path_factory, log_cls, writers, per_writer, fail, data):
    fail_at = data.draw(st.integers(0, writers * per_writer - 1)) if fail else None
    log = log_cls.open(tmp_path_factory.mktemp("log"), fsync="always", truncation_interval=0)
    assert (log.pipelined_queue() is None) == (log_cls is OwnEnqueueLog)
    try:
        gc, chosen, published, returned, errors = _run_writers(log, writers, per_writer, fail_at)
        assert getattr(log, "enqueued", 0) == (len(chosen) if log_cls is OwnEnqueueLog else 0)
        # published in LSN order, each once, in the writers' chosen order
        assert [l for l, _ in published] == sorted({l for l, _ in published})
        assert [p for _, p in published] == chosen[:len(published)]
        # a writer returned only once its item was published
        assert all(was for _, was in returned)
        if fail_at is None:
            assert not errors and len(published) == writers * per_writer == gc.items
            assert gc.pending() == 0 and gc.failed is None
        else:
            assert errors and gc.failed is not None
            bad = b"w%d" % fail_at
            assert bad not in {p for _, p in published}
            with pytest.raises(GroupCommitFailed):
                gc.enqueue(b"late", b"late")
        # the log holds every queued record in the chosen order (durable ones at least up to the
        # last published; the failed publication's record was durable too)
        recs, _ = log.read(1, 1 << 24)
        assert [r.payload for r in recs][:len(chosen)] == chosen[:len(recs)]
        assert len(recs) >= len(published)
    finally:
        log.close()


def test_a_closed_log_fails_the_committer(tmp_path):
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    seen = []
    gc = PipelinedCommitter(log, lambda items, lsns: seen.extend(zip(lsns, items)))
    gc.wait(gc.enqueue(b"a", "a"))
    assert seen == [(1, "a")] and gc.queued == 1
    gc.drain()
    log.close()
    with pytest.raises(GroupCommitFailed) as ei:
        gc.enqueue(b"b", "b")
    assert isinstance(ei.value.__cause__, LogServiceClosed)
    with pytest.raises(GroupCommitFailed):
        gc.wait(2)
    log2 = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    try:
        assert [r.payload for r in log2.read(1, 1 << 20)[0]] == [b"a"]
    finally:
        log2.close()


def test_log_service_enqueue_and_wait_durable(tmp_path):
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    try:
        first = log.append(b"x")
        lsns = [log.enqueue(b"p%d" % i) for i in range(5)]
        assert lsns == list(range(first + 1, first + 6))
        assert log.wait_durable(lsns[2]) >= lsns[2]
        assert log.wait_durable(lsns[-1]) == lsns[-1] == log.get_latest_lsn()
        assert log.wait_durable(first) >= lsns[-1]           # long durable: at once
        assert log.enqueue(bytearray(b"ba"), replica_id=3) == lsns[-1] + 1
        log.wait_durable(lsns[-1] + 1)
        recs, _ = log.read(1, 1 << 20)
        assert [r.payload for r in recs] == [b"x"] + [b"p%d" % i for i in range(5)] + [b"ba"]
        assert recs[-1].replica_id == 3
        # appends and queued waits from 8 threads: every one returns, each with its own LSN
        got, lock = [], threading.Lock()

        def appender(k):
            for i in range(50):
                lsn = log.append(b"h") if i % 2 else log.wait_durable(log.enqueue(b"h")) and 0
                with lock:
                    got.append(lsn)
        ths = [threading.Thread(target=appender, args=(k,)) for k in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert not any(th.is_alive() for th in ths) and len(got) == 400
        assert len({g for g in got if g}) == 200 and log.get_latest_lsn() == lsns[-1] + 401
        with pytest.raises(InvalidArgument):
            log.wait_durable(log.get_latest_lsn() + 1)       # not handed out yet
        with pytest.raises(InvalidArgument):
            log.wait_durable(-1)
        with pytest.raises(InvalidArgument):
            log.enqueue("text")
        with pytest.raises(RecordTooLarge):
            log.enqueue(bytes(log.config().max_record_size))
    finally:
        log.close()
    with pytest.raises(LogServiceClosed):
        log.enqueue(b"late")


def test_primary_stops_when_someone_else_appends_to_its_log(tmp_path):
    """The primary stamps a page with the LSN it expects before the log gives one: a log appended to
    by another writer gives another, and the primary stops (typed error) instead of logging a record
    under an LSN its page does not carry."""
    from logtide.errors import LogtideError
    from logtide.replay.primary import Primary
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    primary = Primary(tmp_path / "p", log=log, checkpoint_interval=0)
    try:
        assert primary.committer.__class__ is PipelinedCommitter
        tid = primary.insert(16384, b"one")
        assert primary.write_lsn == 1 and primary.get(16384, tid) == b"one"
        log.append(b"intruder")
        with pytest.raises(LogtideError, match="someone else"):
            primary.insert(16384, b"two")
        with pytest.raises(LogtideError):
            primary.insert(16384, b"three")
        with pytest.raises(GroupCommitFailed):
            primary.committer.enqueue(b"x", (b"x", []))
    finally:
        primary.crash()       # as a killed process would leave it
        log.close()


def test_primary_stops_writes_when_its_log_fails(tmp_path):
    """A log that refuses a record fails the committer, and the primary takes no further write (its
    pages may hold a change the log does not)."""
    from logtide.errors import LogtideError
    from logtide.replay.primary import Primary
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    primary = Primary(tmp_path / "p", log=log, checkpoint_interval=0)
    try:
        primary.insert(16384, b"one")
        log.close()
        with pytest.raises(GroupCommitFailed):
            primary.insert(16384, b"two")
        with pytest.raises(LogtideError, match="closed"):
            primary.insert(16384, b"three")
    finally:
        primary.crash()
    log2 = LogService.open(tmp_path / "log", truncation_interval=0)
    try:
        assert log2.get_latest_lsn() == 1
    finally:
        log2.close()


def test_a_stopped_primary_still_closes_and_a_new_one_recovers(tmp_path):
    """close() after the primary stopped on a failed log write releases the directory (a new
    Primary opens it in the same process) and checkpoints nothing; the new primary recovers exactly
    the acknowledged rows from the log."""
    from logtide.errors import LogtideError
    from logtide.replay.primary import Primary
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    primary = Primary(tmp_path / "p", log=log, checkpoint_interval=0.01)
    tid = primary.insert(16384, b"one")
    log.close()
    with pytest.raises(GroupCommitFailed):
        primary.insert(16384, b"two")
    primary.close()
    primary.close()                          # a second close is a no-op
    with pytest.raises(LogtideError, match="closed"):
        primary.insert(16384, b"three")
    log2 = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    again = Primary(tmp_path / "p", log=log2, checkpoint_interval=0)   # the directory lock was released
    try:
        assert again.write_lsn == 1
        assert again.get(16384, tid) == b"one"
        assert again.insert(16384, b"four") is not None
        assert again.write_lsn == 2
    finally:
        again.close()
        log2.close()


def test_every_writer_gets_its_own_durable_lsn_on_any_cpus(tmp_path):
    """On every placement (all CPUs, or a thread confined to one) every writer of the committer
    gets its own durable LSN."""
    from logtide.cpu_affinity import allowed_cpus, confined
    from logtide.engine.group_commit import open_committer
    cpus = sorted(allowed_cpus())
    for place in (cpus, cpus[:1]):
        log = LogService.open(tmp_path / f"log-{len(place)}", fsync="always", truncation_interval=0)
        published: list[int] = []
        try:
            with confined(place):
                c = open_committer(log, publish=lambda items, lsns: published.extend(lsns), write_group=None)
                lsns: list[int] = []

                def writer():
                    for _ in range(25):
                        lsn = c.enqueue(b"w", None)
                        c.wait(lsn)
                        lsns.append(lsn)
                ths = [threading.Thread(target=writer) for _ in range(8)]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join(60)
            assert not any(th.is_alive() for th in ths)
            assert sorted(lsns) == sorted(set(lsns)) and len(lsns) == 200
            assert published == sorted(published) and set(lsns) <= set(published)
        finally:
            log.close()


def test_a_gate_claim_left_by_a_writer_that_never_waits_again_is_taken_over(tmp_path):
    """The committer makes its log's woken writers patient (they yield and wait their turn into
    Python rather than sleep on the GIL). A writer that claims that turn and then stays in Python
    without writing again must not hold the others up for good: its claim goes stale and is taken
    over. Every append returns, each with its own LSN."""
    from logtide.engine.group_commit import open_committer
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    try:
        open_committer(log, publish=lambda items, lsns: None, write_group=None)
        start = threading.Barrier(6)
        got, lock = [], threading.Lock()

        def leaver():
            start.wait()
            lsn = log.append(b"leaver")
            with lock:
                got.append(lsn)
            end = time.monotonic() + 0.3
            while time.monotonic() < end:     # Python, and no wait: its claim of the gate goes stale
                pass

        def writer():
            start.wait()
            for _ in range(40):
                lsn = log.append(b"w")
                with lock:
                    got.append(lsn)
        ths = [threading.Thread(target=leaver)] + [threading.Thread(target=writer) for _ in range(5)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert not any(th.is_alive() for th in ths), "a woken writer waited for good on a stale claim"
        assert len(got) == 201 and len(set(got)) == 201
    finally:
        log.close()
