"""CommitQueue's pipelined appends (enqueue_one, enqueue_many + wait_durable) against a model of the durable LSN.

Records are queued without waiting (in any mix with blocking appends); waiter threads then wait
for LSNs in any order, late or early. The test plays the flusher through the calls the log writer's
flusher makes (run over a real segment, a group it hands back published later, publish, fail,
close). After every step: exactly the waiters whose LSN is published have returned (with the
published LSN at least theirs), after a failure the others got LogServiceFailed, and the file holds
every flushed frame in LSN order.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from hypothesis_profiles import scaled
from queue_flusher import NEVER, QueueFlusher

from logtide._ext import wal
from logtide._ext.commit_queue import CLOSED, TIMEOUT, CommitQueue
from logtide.errors import LogServiceClosed, LogServiceFailed

SETTLE = 5.0          # seconds a durable waiter may take to return (a loaded CI machine)
TICK = 0.001          # seconds the test's flusher waits when it has nothing to take (> the hand-off stall)


def _wait_for(cond, what: str, timeout: float = SETTLE) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)


class Waiter:
    """wait_durable(lsn) on its own thread; result is the returned LSN or the exception."""

    def __init__(self, q: CommitQueue, lsn: int, blocking_payload: bytes | None = None) -> None:
        self.lsn = lsn
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(q, blocking_payload), daemon=True)
        self.thread.start()

    def _run(self, q: CommitQueue, payload) -> None:
        try:
            self.result = q.append_one(7, b"PF", payload) if payload is not None else q.wait_durable(self.lsn)
        except BaseException as exc:  # noqa: B902 - the model checks which error
            self.result = exc

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()


class PipelinedQueueMachine(RuleBasedStateMachine):
    @initialize(start=st.sampled_from([1, 2, 2**40]))
    def setup(self, start):
        self.dir = tempfile.mkdtemp(prefix="cqp-")
        self.start = start
        self.q = CommitQueue(start)
        self.fl = QueueFlusher(self.q, self.dir, start)
        self.next = start          # model: the next LSN handed out
        self.queued_to = start - 1  # model: LSNs below this one are queued (taken or not)
        self.written = 0           # bytes in the file
        self.written_lsn = start - 1
        self.published = start - 1
        self.failed = False
        self.closed = False
        self.payloads = {}         # lsn -> payload, for the file check
        self.waiters: list[Waiter] = []
        self.blocking: list[Waiter] = []   # blocking appends mixed in (their own LSN)
        self.held = False          # the flusher handed a group back: it holds the log until its next run

    def teardown(self):
        if hasattr(self, "q"):
            self.q.fail(RuntimeError("test over"))   # no thread is left behind
            for w in self.waiters + self.blocking:
                w.thread.join(SETTLE)
            self.fl.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(size=st.integers(0, 300))
    def enqueue(self, size):
        p = os.urandom(size)
        if self.failed or self.closed:
            with pytest.raises(LogServiceFailed if self.failed else LogServiceClosed):
                self.q.enqueue_one(7, b"PF", p)
            return
        lsn = self.q.enqueue_one(7, b"PF", p)
        assert lsn == self.next
        self.payloads[lsn] = p
        self.next += 1

    @rule(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6), wake=st.booleans())
    def enqueue_many(self, sizes, wake):
        """A server's batch: consecutive LSNs, queued in one hold of the queue."""
        ps = [os.urandom(n) for n in sizes]
        if self.failed or self.closed:
            with pytest.raises(LogServiceFailed if self.failed else LogServiceClosed):
                self.q.enqueue_many(7, [b"PF"] * len(ps), ps)
            return
        first = self.q.enqueue_many(7, [b"PF"] * len(ps), ps, wake)
        assert first == self.next
        for i, p in enumerate(ps):
            self.payloads[first + i] = p
        self.next += len(ps)

    @precondition(lambda self: not self.failed and not self.closed)
    @rule(size=st.integers(0, 40))
    def blocking_append(self, size):
        """A blocking append between pipelined ones: it takes the next LSN and waits like any waiter."""
        p = os.urandom(size)
        w = Waiter(self.q, self.next, p)
        # it takes its LSN and links its waiter in one step, under the queue's mutex
        _wait_for(lambda: self.q.next == w.lsn + 1 or w.done, "the append to register")
        self.payloads[self.next] = p
        self.next += 1
        self.blocking.append(w)

    @precondition(lambda self: self.next > self.start)
    @rule(pick=st.floats(0, 1))
    def wait(self, pick):
        """Wait for any LSN handed out so far: published, written, or still queued."""
        lsn = self.start + round(pick * (self.next - 1 - self.start))
        self.waiters.append(Waiter(self.q, lsn))

    @rule()
    def wait_for_an_lsn_not_handed_out(self):
        with pytest.raises(LogServiceFailed if self.failed else ValueError):
            self.q.wait_durable(self.next)

    def _upto_written(self, frac: float) -> int:
        """An LSN from the published one up to the written one (a prefix of a group, or everything)."""
        lo = self.published
        return lo + round(frac * (self.written_lsn - lo))

    def _run(self, hand_back: bool, publish: int) -> None:
        """One run(), as the flusher calls it: everything queued is one group, handed back unpublished
        when its end reaches the pre-allocation mark (at the written end: any group) or it does not
        fit the index, else published by run itself."""
        self.q.mark = self.written if hand_back else NEVER
        room = self.fl.capacity - self.fl.seg.count
        got = self.fl.run(TICK, publish)
        self.published = max(self.published, publish)
        self.held = isinstance(got, tuple)
        if self.written_lsn < self.next - 1:
            first, last, base = self.written_lsn + 1, self.next - 1, self.written
            self.written += sum(wal.HEADER_SIZE + 2 + len(self.payloads[lsn]) for lsn in range(first, last + 1))
            self.written_lsn = last
            if hand_back or last - first + 2 > room:
                assert isinstance(got, tuple), got
                g_first, g_last, starts, nbytes = got
                assert (g_first, g_last, nbytes) == (first, last, self.written - base)
                assert len(starts) == last - first + 1 and int(starts[0]) == base
                return
            self.published = last
        assert got is (CLOSED if self.closed else TIMEOUT), got

    @precondition(lambda self: not self.failed)
    @rule(hand_back=st.booleans(), pending=st.one_of(st.none(), st.floats(0, 1)))
    def flusher_run(self, hand_back, pending):
        """run(), publishing first any LSN up to the written one (the flusher's last group handed back)."""
        self._run(hand_back, 0 if pending is None else self._upto_written(pending))

    @rule()
    def commit_here(self):
        """An event loop's group: everything queued is written, synced and published by this
        thread, unless the flusher must take it (it holds a group, the log is closing or failed,
        the group reaches the mark or does not fit the index)."""
        first, last = self.written_lsn + 1, self.next - 1
        size = sum(wal.HEADER_SIZE + 2 + len(self.payloads[lsn]) for lsn in range(first, last + 1))
        room = self.fl.capacity - self.fl.seg.count
        here = (last >= first and not (self.failed or self.closed or self.held)
                and last - first + 2 <= room and self.written + size < self.q.mark)
        assert self.q.commit_here() is here
        if here:
            self.written += size
            self.written_lsn = self.published = last

    @precondition(lambda self: not self.failed)
    @rule(frac=st.floats(0, 1))
    def publish(self, frac):
        lsn = self._upto_written(frac)
        self.q.publish(lsn)
        self.published = max(self.published, lsn)

    @rule()
    def fail(self):
        self.q.fail(OSError(5, "I/O error"))
        self.failed = True

    @rule()
    def close(self):
        self.q.close()
        self.closed = True

    @invariant()
    def exactly_the_durable_waiters_return(self):
        if not hasattr(self, "q"):
            return
        if self.written_lsn == self.next - 1 and not self.failed:
            self._run(False, 0)
        for w in self.waiters + self.blocking:
            if w.lsn <= self.published:
                w.thread.join(SETTLE)
                assert w.done, f"a wait for {w.lsn} still waits; {self.published} is published"
                if not w.done:
                    continue
                if w in self.blocking:
                    assert w.result == w.lsn, w.result
                else:
                    assert isinstance(w.result, int) and w.lsn <= w.result <= self.published, w.result
            elif self.failed:
                w.thread.join(SETTLE)
                assert w.done and isinstance(w.result, LogServiceFailed), w.result
        time.sleep(0.002)
        for w in self.waiters + self.blocking:
            if w.lsn > self.published and not self.failed:
                assert not w.done, f"a wait for {w.lsn} returned {w.result!r}; only {self.published} is published"
        assert self.q.published_lsn == self.published

    @invariant()
    def the_file_and_the_index_hold_every_written_frame_in_order(self):
        if hasattr(self, "q"):
            self.fl.assert_holds(self.written_lsn, self.written, lambda lsn: (7, b"PF" + self.payloads[lsn]))


TestPipelinedQueueModel = PipelinedQueueMachine.TestCase
TestPipelinedQueueModel.settings = scaled(max_examples=30, stateful_step_count=20, deadline=None)


def test_wait_durable_of_a_published_lsn_returns_at_once(tmp_path):
    q = CommitQueue(10)
    a, b = q.enqueue_one(0, b"", b"a"), q.enqueue_one(0, b"", memoryview(b"bb"))
    assert (a, b) == (10, 11)
    fl = QueueFlusher(q, tmp_path, 10)
    try:
        assert fl.run(0.01) is TIMEOUT and q.published_lsn == 11  # the group written and published
        assert q.wait_durable(10) == 11 and q.wait_durable(11) == 11
    finally:
        fl.close()
    with pytest.raises(TypeError):
        q.enqueue_one(0, b"", 3)


def test_enqueue_many_is_one_group_with_consecutive_lsns(tmp_path):
    """A batch queued with enqueue_many is taken whole by one flusher run (one write, one fsync),
    however the flusher's wake-up falls; bad arguments are refused before anything is queued."""
    q = CommitQueue(5)
    fl = QueueFlusher(q, tmp_path, 5, sync_always=True)
    try:
        with pytest.raises(ValueError):
            q.enqueue_many(7, [b"PF"], [b"a", b"b"])
        with pytest.raises(ValueError):
            q.enqueue_many(7, [], [])
        with pytest.raises(TypeError):
            q.enqueue_many(7, [b"PF", b"PF"], [b"a", memoryview(b"b")])
        assert q.next == 5                                    # nothing was queued
        payloads = [os.urandom(n) for n in (0, 1, 200, 17)]
        assert q.enqueue_many(7, [b"PF"] * 4, payloads) == 5
        groups = q.groups
        fl.run(0.01)
        assert q.groups == groups + 1 and q.published_lsn == 8
        assert q.wait_durable(8) == 8
        fl.assert_holds(8, sum(wal.HEADER_SIZE + 2 + len(p) for p in payloads),
                        lambda lsn: (7, b"PF" + payloads[lsn - 5]))
    finally:
        fl.close()
