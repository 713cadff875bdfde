"""The timestamp oracle's counter in C (_ext/tso_window.pyx, behind engine/logservice/tso.py)
against the reference: a counter that reserves `first + count + window` whenever a range would
pass the reserved limit, before handing any of it out.

Checked: the same ranges and the same reservations as the reference for any sequence of counts;
ranges from many threads (while a reservation lets others run) are disjoint and each lies below a
limit reserved before it was handed out; bad counts and a closed oracle raise typed errors.
"""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logservice.tso import TSO
from logtide.errors import InvalidArgument, LogServiceClosed


class ReferenceTSO:
    def __init__(self, limit: int, window: int) -> None:
        self.next = max(1, limit)
        self.limit = self.next
        self.window = window
        self.reserved: list[int] = []

    def get(self, count: int) -> int:
        first = self.next
        if first + count > self.limit:
            self.limit = first + count + self.window
            self.reserved.append(self.limit)
        self.next = first + count
        return first


@scaled(max_examples=100)
@given(limit=st.integers(0, 1 << 40), window=st.integers(1, 100),
       counts=st.lists(st.integers(1, 300), max_size=60))
def test_tso_matches_the_reference(limit, window, counts):
    ref = ReferenceTSO(limit, window)
    reserved: list[int] = []
    tso = TSO(limit, reserved.append, window)
    for count in counts:
        assert tso.get(count) == ref.get(count)
    assert reserved == ref.reserved


@scaled(max_examples=10, deadline=None)
@given(window=st.integers(1, 40), threads=st.integers(2, 8), per=st.integers(1, 40),
       counts=st.lists(st.integers(1, 50), min_size=1, max_size=8))
def test_concurrent_ranges_are_disjoint_and_reserved_first(window, threads, per, counts):
    reserved = [1]
    lock = threading.Lock()

    def reserve(limit):
        time.sleep(0.0002)        # lets the other threads run meanwhile (as a persisted reserve does)
        with lock:
            reserved.append(limit)

    tso = TSO(1, reserve, window)
    got: list[tuple[int, int, int]] = []

    def body(k):
        for i in range(per):
            count = counts[(k + i) % len(counts)]
            first = tso.get(count)
            with lock:
                # everything handed out lies below a limit already reserved
                assert first + count <= max(reserved)
                got.append((first, first + count, max(reserved)))
    ths = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(30)
    assert len(got) == threads * per
    spans = sorted((a, b) for a, b, _ in got)
    assert all(b0 <= a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))
    assert spans[0][0] >= 1


def test_bad_counts_and_a_closed_tso_are_typed_errors():
    tso = TSO(5, lambda limit: None, 10)
    for bad in (0, -1, "3", 1.5, True, (1 << 32) + 1):
        with pytest.raises(InvalidArgument):
            tso.get(bad)
    assert tso.get(1 << 32) == 5
    tso.close()
    with pytest.raises(LogServiceClosed):
        tso.get(1)
