"""CommitQueue (the log service's Cython wait path) against a model of waiters and the durable LSN.

Real appender threads block in the queue; the test plays the flusher (flush to a real file,
publish, fail, close). After every step the threads that returned must be exactly the appends whose
last LSN is published, each with its own LSN, and the file must hold every flushed frame in order.
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

from logtide._ext import wal
from logtide._ext.commit_queue import CLOSED, KICKED, TIMEOUT, CommitQueue
from logtide.errors import LogServiceClosed, LogServiceFailed

SETTLE = 5.0          # seconds a durable waiter may take to return (a loaded CI machine)
STALL = 0.0003        # > the queue's hand-off stall (0.2 ms): a flusher tick then wakes every durable waiter


def _wait_for(cond, what: str, timeout: float = SETTLE) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)


class Appender:
    """One blocking append on its own thread; result is the returned LSN or the exception."""

    def __init__(self, q: CommitQueue, payloads: list[bytes]) -> None:
        self.payloads = payloads
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(q,), daemon=True)
        self.thread.start()

    def _run(self, q: CommitQueue) -> None:
        try:
            if len(self.payloads) == 1:
                self.result = q.append_one(7, b"PF", self.payloads[0])
            else:
                self.result = q.append_many(7, b"PF", self.payloads)
        except BaseException as exc:  # noqa: B902 - the model checks which error
            self.result = exc

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()


class CommitQueueMachine(RuleBasedStateMachine):
    @initialize(start=st.sampled_from([1, 2, 1000, 2**40]), handoff=st.booleans())
    def setup(self, start, handoff):
        self.dir = tempfile.mkdtemp(prefix="cq-")
        self.fd = os.open(os.path.join(self.dir, "seg"), os.O_WRONLY | os.O_CREAT, 0o644)
        self.start = start
        self.q = CommitQueue(start, handoff=handoff)
        self.next = start          # model: the next LSN handed out
        self.queued = []           # model: (appender, first, last) not yet taken by a flush
        self.flushed = []          # taken by a flush, written
        self.written = 0           # bytes in the file
        self.written_lsn = start - 1
        self.published = start - 1
        self.failed = False
        self.closed = False
        self.payloads = {}         # lsn -> payload, for the file check

    def teardown(self):
        if hasattr(self, "q"):
            self.q.fail(RuntimeError("test over"))   # no appender thread is left behind
            for a, _, _ in self.queued + self.flushed:
                a.thread.join(SETTLE)
            os.close(self.fd)
            shutil.rmtree(self.dir, ignore_errors=True)

    def _append(self, payloads):
        before = self.q.waiting()
        a = Appender(self.q, payloads)
        if self.failed or self.closed:
            a.thread.join(SETTLE)
            assert a.done and isinstance(a.result, LogServiceFailed if self.failed else LogServiceClosed), a.result
            return
        _wait_for(lambda: self.q.waiting() == before + 1 or a.done, "the append to register")
        first = self.next
        self.next += len(payloads)
        for i, p in enumerate(payloads):
            self.payloads[first + i] = p
        self.queued.append((a, first, self.next - 1))

    @rule(size=st.integers(0, 300))
    def append_one(self, size):
        self._append([os.urandom(size)])

    @rule(sizes=st.lists(st.integers(0, 64), min_size=2, max_size=6))
    def append_many(self, sizes):
        self._append([os.urandom(s) for s in sizes])

    @precondition(lambda self: not self.failed)
    @rule()
    def flush(self):
        got = self.q.flush(self.fd, False, self.written, 0.001)
        if not self.queued:
            assert got in (CLOSED, TIMEOUT) if self.closed else got is TIMEOUT
            return
        first, last, starts, nbytes = got
        assert first == self.queued[0][1] and last == self.queued[-1][2]
        assert len(starts) == last - first + 1 and int(starts[0]) == self.written
        self.written += nbytes
        self.written_lsn = last
        self.flushed += self.queued
        self.queued = []

    @precondition(lambda self: not self.failed)
    @rule(frac=st.floats(0, 1))
    def publish(self, frac):
        """Publish any LSN up to the written one (a prefix of a group, or everything)."""
        lo = self.published
        lsn = lo + round(frac * (self.written_lsn - lo))
        self.q.publish(lsn)
        self.published = max(self.published, lsn)

    @precondition(lambda self: not self.failed)
    @rule()
    def kick(self):
        self.q.kick()
        got = self.q.flush(self.fd, False, self.written, 0.001)
        if self.queued:  # a kick never hides queued appends
            self.flushed += self.queued
            first, last, starts, nbytes = got
            assert (first, last) == (self.queued[0][1], self.queued[-1][2])
            self.written += nbytes
            self.written_lsn = last
            self.queued = []
        else:
            assert got is KICKED

    @rule()
    def fail(self):
        self.q.fail(OSError(27, "File too large"))
        self.failed = True

    @rule()
    def close(self):
        self.q.close()
        self.closed = True

    @invariant()
    def exactly_the_durable_waiters_return(self):
        if not hasattr(self, "q"):
            return
        time.sleep(STALL)
        self.q.wake_stalled()  # what the flusher does each time it waits
        for a, first, last in self.queued + self.flushed:
            if last <= self.published:
                a.thread.join(SETTLE)
                assert a.done, f"append {first}..{last} is durable ({self.published}) but still waits"
                assert a.result == first, a.result
            elif self.failed:
                a.thread.join(SETTLE)
                assert a.done and isinstance(a.result, LogServiceFailed), a.result
        time.sleep(0.002)
        for a, first, last in self.queued + self.flushed:
            if last > self.published and not self.failed:
                assert not a.done, f"append {first}..{last} returned {a.result!r} before LSN {last} was published"
        assert self.q.published_lsn == self.published

    @invariant()
    def the_file_holds_every_flushed_frame_in_order(self):
        if not hasattr(self, "q") or not self.written:
            return
        with open(os.path.join(self.dir, "seg"), "rb") as f:
            buf = f.read()
        assert len(buf) == self.written
        starts, types, lengths, end, status = wal.scan(buf, 0, self.start)
        assert status == wal.OK and end == self.written
        assert len(starts) == self.written_lsn - self.start + 1 and set(types.tolist()) <= {7}
        recs = wal.decode(buf, starts, types, lengths, self.start, lambda lsn, t, data: (lsn, data))
        assert all(data == b"PF" + self.payloads[lsn] for lsn, data in recs)


TestCommitQueueModel = CommitQueueMachine.TestCase
TestCommitQueueModel.settings = scaled(max_examples=30, stateful_step_count=20, deadline=None)


@pytest.mark.timeout(60)
def test_publish_wakes_a_prefix_only_in_lsn_order():
    """Waiters registered in LSN order: publishing LSN k wakes exactly those at or below k."""
    q = CommitQueue(1)
    apps = []
    for i in range(12):
        before = q.waiting()
        apps.append(Appender(q, [b"r%d" % i]))
        _wait_for(lambda: q.waiting() == before + 1, "registration")
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        first, last, _, _ = q.flush(fd, False, 0, 1.0)
        assert (first, last) == (1, 12)
        for k in (3, 3, 7, 12):
            q.publish(k)
            time.sleep(STALL)
            q.wake_stalled()  # the flusher's tick: unclaimed hand-offs are woken
            for i, a in enumerate(apps, start=1):
                if i <= k:
                    a.thread.join(SETTLE)
                    assert a.result == i
            time.sleep(0.002)
            assert all(not a.done for a in apps[k:])
    finally:
        q.fail(RuntimeError("test over"))
        os.close(fd)


@pytest.mark.timeout(60)
def test_group_words_wake_exactly_the_published_waiters():
    """Without hand-off the waiters of a group share a futex word, one per group parity: groups 1
    and 3 sleep on the same word. Publishing part of group 1 wakes that word, and the waiters whose
    LSN is not published (the rest of group 1, all of group 3) must go back to sleep; group 2, on
    the other word, must not return either."""
    q = CommitQueue(1, handoff=False)
    fd = os.open(os.devnull, os.O_WRONLY)
    groups = []
    try:
        for g in range(3):
            apps = []
            for i in range(3):
                before = q.waiting()
                apps.append(Appender(q, [b"g%dr%d" % (g, i)]))
                _wait_for(lambda: q.waiting() == before + 1, "registration")
            first, last, _, _ = q.flush(fd, False, 0, 1.0)
            assert (first, last) == (3 * g + 1, 3 * g + 3)
            groups.append(apps)
        waiters = [a for apps in groups for a in apps]
        for k in (1, 3, 5, 6, 9):
            q.publish(k)
            for lsn, a in enumerate(waiters, start=1):
                if lsn <= k:
                    a.thread.join(SETTLE)
                    assert a.done and a.result == lsn, (k, lsn, a.result)
            time.sleep(0.005)  # a woken waiter whose LSN is above k had time to return wrongly
            assert all(not a.done for a in waiters[k:]), k
    finally:
        q.fail(RuntimeError("test over"))
        os.close(fd)
    for a in waiters:
        a.thread.join(SETTLE)
        assert a.done


@pytest.mark.timeout(60)
def test_flusher_naps_once_for_an_expected_group_then_sleeps_until_woken(tmp_path):
    """After a synced group of 3 the flusher expects another (commit delay): with nothing queued it
    naps once, for the delay, then stops expecting one; an append then wakes it as usual."""
    q = CommitQueue(1, handoff=False)
    fd = os.open(tmp_path / "seg", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        apps = []
        for i in range(3):
            before = q.waiting()
            apps.append(Appender(q, [b"r%d" % i]))
            _wait_for(lambda: q.waiting() == before + 1, "registration")
        first, last, _, nbytes = q.flush(fd, True, 0, 1.0)
        assert (first, last, q.naps) == (1, 3, 0)
        q.publish(3)
        for a in apps:
            a.thread.join(SETTLE)
        assert [a.result for a in apps] == [1, 2, 3]
        assert q.flush(fd, True, nbytes, 0.05) is TIMEOUT
        assert q.naps == 1  # one nap, then an unbounded sleep (up to the timeout)
        late = Appender(q, [b"late"])
        got = q.flush(fd, True, nbytes, 5.0)  # woken by the append, not by the timeout
        assert got[:2] == (4, 4) and q.naps == 1
        q.publish(4)
        late.thread.join(SETTLE)
        assert late.result == 4
    finally:
        q.fail(RuntimeError("test over"))
        os.close(fd)


def test_queue_refuses_after_close_and_failure():
    q = CommitQueue(5)
    q.close()
    with pytest.raises(LogServiceClosed):
        q.append_one(0, b"", b"x")
    q2 = CommitQueue(5)
    q2.fail(OSError(5, "I/O error"))
    with pytest.raises(LogServiceFailed) as ei:
        q2.append_many(0, b"", [b"a", b"b"])
    assert isinstance(ei.value.__cause__, OSError)
    with pytest.raises(ValueError):
        CommitQueue(1).append_many(0, b"", [])
    with pytest.raises(TypeError):
        CommitQueue(1).append_one(0, None, b"x")
    with pytest.raises(TypeError):
        CommitQueue(1).append_many(0, b"", [b"ok", 3])


def test_run_writes_indexes_and_publishes_into_the_bound_segment(tmp_path):
    """run() against a real file: groups land at the bound end, the offsets and count cell advance
    in place, the durable LSN follows, and a group reaching the roll size comes back to Python
    unindexed. A lone appender (direct mode) writes and indexes its record in its own call."""
    import numpy as np
    q = CommitQueue(1)
    with pytest.raises(ValueError):
        q.run(0.01)  # nothing bound
    with pytest.raises(ValueError):
        q.bind_index(0, np.zeros(4, dtype=np.int64), np.zeros(1, dtype=np.uint64), 0, 1 << 20)
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT, 0o644)
    starts, count = np.zeros(64, dtype=np.uint64), np.zeros(1, dtype=np.uint64)
    q.set_segment(fd, 0)
    q.bind_index(fd, starts, count, 0, 4096)
    q.configure(False, True, 0.0)
    try:
        assert q.append_one(0, b"", b"solo") == 1  # idle log: the appender writes itself
        assert (q.direct_writes, int(count[0]), q.durable_lsn) == (1, 1, 1)
        apps = [Appender(q, [b"g%d" % i]) for i in range(3)]
        deadline = time.monotonic() + 30
        while any(not a.done for a in apps):  # each may have written itself, or queued for run()
            assert q.run(0.05) in (TIMEOUT, KICKED) and time.monotonic() < deadline
        assert sorted(a.result for a in apps) == [2, 3, 4] and q.durable_lsn == 4 and int(count[0]) == 4
        big = Appender(q, [b"x" * 5000])  # reaches the roll size: handed back unindexed
        got = q.run(1.0)
        while got == TIMEOUT and time.monotonic() < deadline:
            got = q.run(0.05)
        first, last, _, nbytes = got
        assert (first, last, int(count[0]), q.durable_lsn) == (5, 5, 4, 4) and not big.done
        q.publish(5)
        big.thread.join(SETTLE)
        assert big.result == 5
        data = os.pread(fd, 1 << 16, 0)
        found, _, _, _, _ = wal.scan(data, 0, 1, 4)
        assert list(found[:4]) == list(starts[:4])  # the index holds the frames' real offsets
    finally:
        q.fail(RuntimeError("test over"))
        os.close(fd)
