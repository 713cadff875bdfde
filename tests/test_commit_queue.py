"""CommitQueue (the log service's Cython wait path) against a model of waiters and the durable LSN.

Real appender threads block in the queue; the test plays the flusher through the calls the log
writer's flusher makes (run over a real segment, a group it hands back indexed in Python and
published later, publish, kick, fail, close). After every step the threads that returned must be
exactly the appends whose last LSN is published, each with its own LSN, and the file and the
segment's index must hold every written frame in order.
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
from logtide._ext.commit_queue import CLOSED, KICKED, TIMEOUT, CommitQueue
from logtide.errors import LogServiceClosed, LogServiceFailed

SETTLE = 5.0          # seconds a durable waiter may take to return (a loaded CI machine)
TICK = 0.001          # seconds the test's flusher waits when it has nothing to take (> the hand-off stall)
# where a run's pre-allocation mark lies: past the written end by this much, or nowhere (frames are
# 22-322 bytes, so a group's end falls on either side)
MARKS = st.one_of(st.none(), st.integers(0, 400))


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


def _registered(q: CommitQueue, payloads: list[bytes]) -> Appender:
    """An append that has taken its LSNs, and so linked its waiter (one step, under the queue's mutex)."""
    want = q.next + len(payloads)
    a = Appender(q, payloads)
    _wait_for(lambda: q.next == want or a.done, "the append to register")
    return a


class CommitQueueMachine(RuleBasedStateMachine):
    @initialize(start=st.sampled_from([1, 2, 1000, 2**40]), sync=st.booleans(),
                roll_at=st.sampled_from([NEVER, 2048]))
    def setup(self, start, sync, roll_at):
        self.dir = tempfile.mkdtemp(prefix="cq-")
        self.start = start
        self.q = CommitQueue(start)
        self.fl = QueueFlusher(self.q, self.dir, start, sync, roll_at)
        self.next = start          # model: the next LSN handed out
        self.queued = []           # model: (appender, first, last) not yet taken by a run
        self.flushed = []          # taken by a run, written
        self.written = 0           # bytes in the file
        self.written_lsn = start - 1
        self.published = start - 1
        self.kicked = False        # a kick run() has not answered yet
        self.failed = False
        self.closed = False
        self.payloads = {}         # lsn -> payload, for the file check

    def teardown(self):
        if hasattr(self, "q"):
            self.q.fail(RuntimeError("test over"))   # no appender thread is left behind
            for a, _, _ in self.queued + self.flushed:
                a.thread.join(SETTLE)
            self.fl.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _append(self, payloads):
        a = _registered(self.q, payloads)
        if self.failed or self.closed:
            a.thread.join(SETTLE)
            assert a.done and isinstance(a.result, LogServiceFailed if self.failed else LogServiceClosed), a.result
            return
        first = self.next
        self.next += len(payloads)
        assert self.q.next == self.next
        for i, p in enumerate(payloads):
            self.payloads[first + i] = p
        self.queued.append((a, first, self.next - 1))

    def _upto_written(self, frac: float) -> int:
        """An LSN from the published one up to the written one (a prefix of a group, or everything)."""
        lo = self.published
        return lo + round(frac * (self.written_lsn - lo))

    def _run(self, mark: int | None, publish: int) -> None:
        """One run(), as the flusher calls it, against the model. The queued appends form one group:
        run hands it back unpublished when its end reaches the mark (`mark` bytes past the written
        end) or the roll size or it does not fit the index; else run publishes it itself. Nothing
        else comes back before a kick is answered (a kick never hides queued appends), then a close."""
        base = self.written
        self.q.mark = NEVER if mark is None else base + mark
        room = self.fl.capacity - self.fl.seg.count
        got = self.fl.run(TICK, publish)
        self.published = max(self.published, publish)
        if self.queued:
            first, last = self.queued[0][1], self.queued[-1][2]
            end = base + sum(wal.HEADER_SIZE + 2 + len(self.payloads[lsn]) for lsn in range(first, last + 1))
            self.written, self.written_lsn = end, last
            self.flushed += self.queued
            self.queued = []
            if end >= self.q.mark or end >= self.fl.roll_at or last - first + 2 > room:
                assert isinstance(got, tuple), got
                g_first, g_last, starts, nbytes = got
                assert (g_first, g_last, nbytes) == (first, last, end - base)
                assert len(starts) == last - first + 1 and int(starts[0]) == base
                return  # a kick is answered once the groups queued with it are published
            self.published = last
        assert got is (KICKED if self.kicked else CLOSED if self.closed else TIMEOUT), got
        self.kicked = False

    @rule(size=st.integers(0, 300))
    def append_one(self, size):
        self._append([os.urandom(size)])

    @rule(sizes=st.lists(st.integers(0, 64), min_size=2, max_size=6))
    def append_many(self, sizes):
        self._append([os.urandom(s) for s in sizes])

    @precondition(lambda self: not self.failed)
    @rule(mark=MARKS, pending=st.one_of(st.none(), st.floats(0, 1)))
    def flusher_run(self, mark, pending):
        """run(), publishing first any LSN up to the written one (the flusher's last group handed back)."""
        self._run(mark, 0 if pending is None else self._upto_written(pending))

    @precondition(lambda self: not self.failed)
    @rule(frac=st.floats(0, 1))
    def publish(self, frac):
        lsn = self._upto_written(frac)
        self.q.publish(lsn)
        self.published = max(self.published, lsn)

    @precondition(lambda self: not self.failed)
    @rule(mark=MARKS)
    def kick(self, mark):
        self.q.kick()
        self.kicked = True
        self._run(mark, 0)

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
        if not self.queued and not self.failed:
            self._run(None, 0)
        for a, first, last in self.queued + self.flushed:
            if last <= self.published:
                a.thread.join(SETTLE)
                assert a.done, f"append {first}..{last} is durable ({self.published}) but still waits"
                assert not a.done or a.result == first, a.result
            elif self.failed:
                a.thread.join(SETTLE)
                assert a.done and isinstance(a.result, LogServiceFailed), a.result
        time.sleep(0.002)
        for a, first, last in self.queued + self.flushed:
            if last > self.published and not self.failed:
                assert not a.done, f"append {first}..{last} returned {a.result!r} before LSN {last} was published"
        assert self.q.published_lsn == self.published

    @invariant()
    def the_file_and_the_index_hold_every_written_frame_in_order(self):
        if hasattr(self, "q"):
            self.fl.assert_holds(self.written_lsn, self.written, lambda lsn: (7, b"PF" + self.payloads[lsn]))


TestCommitQueueModel = CommitQueueMachine.TestCase
TestCommitQueueModel.settings = scaled(max_examples=30, stateful_step_count=20, deadline=None)


@pytest.mark.timeout(60)
def test_publish_wakes_a_prefix_only_in_lsn_order(tmp_path):
    """Waiters registered in LSN order: publishing LSN k wakes exactly those at or below k."""
    q = CommitQueue(1)
    fl = QueueFlusher(q, tmp_path, 1)
    q.mark = 0  # the group comes back to Python unpublished
    apps = [_registered(q, [b"r%d" % i]) for i in range(12)]
    try:
        first, last, _, _ = fl.run(1.0)
        assert (first, last) == (1, 12)
        for k in (3, 3, 7, 12):
            q.publish(k)
            assert fl.run(TICK) is TIMEOUT  # nothing else is queued
            for i, a in enumerate(apps, start=1):
                if i <= k:
                    a.thread.join(SETTLE)
                    assert a.result == i
            time.sleep(0.002)
            assert all(not a.done for a in apps[k:])
    finally:
        q.fail(RuntimeError("test over"))
        fl.close()


@pytest.mark.timeout(60)
def test_group_words_wake_exactly_the_published_waiters(tmp_path):
    """Without hand-off the waiters of a group share a futex word, one per group parity: groups 1
    and 3 sleep on the same word. Publishing part of group 1 wakes that word, and the waiters whose
    LSN is not published (the rest of group 1, all of group 3) must go back to sleep; group 2, on
    the other word, must not return either."""
    q = CommitQueue(1)
    fl = QueueFlusher(q, tmp_path, 1)
    q.mark = 0  # each group comes back to Python unpublished
    groups = []
    try:
        for g in range(3):
            apps = [_registered(q, [b"g%dr%d" % (g, i)]) for i in range(3)]
            first, last, _, _ = fl.run(1.0)
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
        fl.close()
    for a in waiters:
        a.thread.join(SETTLE)
        assert a.done


def _after_a_synced_group_of_3(q: CommitQueue, fl: QueueFlusher) -> None:
    """Three appenders, one synced group handed back, then published by the next run(), which
    finds nothing queued: the flusher expects another group of 3 (commit delay) and naps once."""
    q.mark = 0  # each group comes back to Python: the test sees the flusher between groups
    apps = [_registered(q, [b"r%d" % i]) for i in range(3)]
    first, last, _, _ = fl.run(1.0)
    assert (first, last, q.naps) == (1, 3, 0)
    assert fl.run(0.05, publish=3) is TIMEOUT  # the group published, then nothing queued
    for a in apps:
        a.thread.join(SETTLE)
    assert [a.result for a in apps] == [1, 2, 3]
    assert q.naps == 1


@pytest.mark.timeout(60)
def test_flusher_naps_once_for_an_expected_group(tmp_path):
    """After a synced group of 3 the flusher expects another: with nothing queued it naps for the
    commit delay; an append then gets its group as usual."""
    q = CommitQueue(1)
    fl = QueueFlusher(q, tmp_path, 1, sync_always=True)
    try:
        _after_a_synced_group_of_3(q, fl)
        late = _registered(q, [b"late"])
        assert fl.run(5.0)[:2] == (4, 4)
        q.publish(4)
        late.thread.join(SETTLE)
        assert late.result == 4
    finally:
        q.fail(RuntimeError("test over"))
        fl.close()


@pytest.mark.timeout(60)
def test_flusher_naps_once_then_sleeps_until_woken(tmp_path):
    """A nap that ends with nothing queued ends the expectation (docs/wal_format.md, "Commit
    delay"): the flusher then sleeps until the timeout or an append, which wakes it."""
    q = CommitQueue(1)
    fl = QueueFlusher(q, tmp_path, 1, sync_always=True)
    late = []
    try:
        _after_a_synced_group_of_3(q, fl)
        threading.Timer(0.2, lambda: late.append(Appender(q, [b"late"]))).start()
        t0 = time.monotonic()
        got = fl.run(5.0)
        assert got[:2] == (4, 4) and q.naps == 1, got  # no second nap, and no return before the append
        assert time.monotonic() - t0 < 4.0  # woken by the append, not by the timeout
    finally:
        q.fail(RuntimeError("test over"))
        fl.close()
        for a in late:
            a.thread.join(SETTLE)


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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("patient", [False, True])
def test_spin_limit_is_checked_and_a_woken_group_still_gets_its_lsns(tmp_path, patient):
    """set_spin_limit refuses a limit outside [0, 1 ms] (NaN included) and a non-number, and leaves
    the queue as it was; with the writers' limit (60 us), patient or not, a group woken at once
    returns each appender its own LSN."""
    q = CommitQueue(1)
    for bad in (-1e-6, 0.0011, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            q.set_spin_limit(bad, patient)
    with pytest.raises(TypeError):
        q.set_spin_limit("60us")
    q.set_spin_limit(60e-6, patient)
    fl = QueueFlusher(q, tmp_path, 1)
    q.mark = 0  # the group comes back to Python: the test publishes it
    try:
        apps = [_registered(q, [b"r%d" % i]) for i in range(8)]
        first, last, _, _ = fl.run(1.0)
        assert (first, last) == (1, 8)
        assert fl.run(0.05, publish=8) is TIMEOUT
        for a in apps:
            a.thread.join(SETTLE)
        assert [a.result for a in apps] == list(range(1, 9))
    finally:
        fl.close()
