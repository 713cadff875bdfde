"""The control file (atomic, CRC-checked) and the primary's meta queue."""
import threading
import time

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from hypothesis_profiles import scaled

from logtide.errors import CorruptionError
from logtide.replay.control_file import Control, read_control, write_control
from logtide.replay.meta_queue import MetaQueue


def test_control_file_roundtrip_and_corruption(tmp_path):
    assert read_control(tmp_path) == Control(0, 1)
    write_control(tmp_path, Control(12345, 77))
    assert read_control(tmp_path) == Control(12345, 77)
    write_control(tmp_path, Control(2**63, 1))
    assert read_control(tmp_path) == Control(2**63, 1)
    raw = (tmp_path / "control").read_bytes()
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1
        (tmp_path / "control").write_bytes(bytes(bad))
        if i >= 28:  # the reserved word is not covered; everything else is
            continue
        with pytest.raises(CorruptionError):
            read_control(tmp_path)
    (tmp_path / "control").write_bytes(raw[:20])
    with pytest.raises(CorruptionError):
        read_control(tmp_path)
    assert not (tmp_path / "control.tmp").exists()


def test_meta_queue_positions_trim_and_wait():
    q = MetaQueue(capacity=100)
    for l in range(1, 51):
        q.push(l, b"m%d" % l)
    lsns, metas = q.read(10, 5, 0)
    assert lsns == [10, 11, 12, 13, 14] and metas[0] == b"m10"
    q.trim(20)
    assert q.first_lsn() == 20 and q.read(5, 5, 0) is None  # older than the queue: read the log
    assert q.read(51, 5, 0.05) == ([], [])                   # nothing yet: empty after the wait
    got = []
    t = threading.Thread(target=lambda: got.append(q.read(51, 5, 5)))
    t.start()
    time.sleep(0.05)
    q.push(51, b"late")
    t.join(5)
    assert got == [([51], [b"late"])]
    for l in range(52, 300):
        q.push(l, b"x")
    assert len(q) == 100 and q.first_lsn() == 200  # bounded


class MetaQueueMachine(RuleBasedStateMachine):
    """MetaQueue against a list of its live (LSN, meta) entries: pushes (some long enough to compact
    the dropped prefix), the capacity bound, trims and reads."""

    def __init__(self):
        super().__init__()
        self.cap = None
        self.q = None
        self.model = []
        self.next = 1

    @initialize(cap=st.sampled_from([5, 100, 6000]))
    def make(self, cap):
        self.cap, self.q = cap, MetaQueue(capacity=cap)

    def _bound(self):
        del self.model[:max(0, len(self.model) - self.cap)]

    @rule(gap=st.integers(1, 3))
    def push(self, gap):
        lsn, self.next = self.next + gap - 1, self.next + gap
        self.q.push(lsn, b"m%d" % lsn)
        self.model.append((lsn, b"m%d" % lsn))
        self._bound()

    @rule(n=st.one_of(st.integers(1, 20), st.integers(4000, 9000)))
    def push_many(self, n):
        lsns = range(self.next, self.next + n)
        self.next += n
        self.q.push_many(lsns, [b"m%d" % l for l in lsns])
        self.model.extend((l, b"m%d" % l) for l in lsns)
        self._bound()

    @rule(back=st.integers(0, 12000))
    def trim(self, back):
        below = max(0, self.next - back)
        self.q.trim(below)
        self.model = [e for e in self.model if e[0] >= below]

    @rule(back=st.integers(-2, 12000), max_n=st.integers(1, 50))
    def read(self, back, max_n):
        self._read(self.next - back, max_n)

    @rule(off=st.integers(-2, 2), max_n=st.integers(1, 50))
    def read_at_the_oldest(self, off, max_n):
        self._read((self.model[0][0] if self.model else self.next) + off, max_n)

    def _read(self, frm, max_n):
        got = self.q.read(frm, max_n, 0)
        if not self.model or self.model[-1][0] < frm:
            assert got == ([], [])
        elif self.model[0][0] > frm:
            assert got is None
        else:
            live = [e for e in self.model if e[0] >= frm][:max_n]
            assert got == ([l for l, _ in live], [m for _, m in live])

    @invariant()
    def agrees(self):
        if self.q is not None:
            assert len(self.q) == len(self.model)
            assert self.q.first_lsn() == (self.model[0][0] if self.model else 0)


TestMetaQueueMachine = MetaQueueMachine.TestCase
TestMetaQueueMachine.settings = scaled(60, stateful_step_count=30)
