"""The leader group committer (engine/group_commit/leader.py) against a serial model, driven by many threads.

The serial model: every item is appended once, in ticket order, and its writer returns after it was
appended. Hypothesis chooses the writers, their items, the flush's time, whether the flush calls
`handoff` itself (else the committer does, after it), and a group that fails. Checked: the flushed
sequence is the model's (a prefix of it when a group fails), groups are contiguous runs of tickets,
every writer returns only after its own group's flush returned and after the next group's handoff
(or with no next group), and a failure fails its group and everything after it, never a flushed item.
"""
import threading
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.group_commit import LeaderCommitter
from logtide.errors import GroupCommitFailed


def _run(writers: int, per_writer: int, delay: float, calls_handoff: bool, fail_at: int | None):
    groups: list[list[int]] = []
    flushed_at: dict[int, int] = {}        # item -> index of its group (set once its flush returned)
    state = threading.Lock()

    def write_group(group, handoff):
        g = len(groups)
        groups.append(list(group))
        if calls_handoff:
            handoff()
        time.sleep(delay)             # the append's fsync, with the GIL released
        if fail_at is not None and group[0] <= fail_at <= group[-1]:
            raise OSError("disk gone")
        with state:
            for item in group:
                flushed_at[item] = g

    gc = LeaderCommitter(write_group, timeout=60)
    order = threading.Lock()
    next_item = [0]
    acked: list[tuple[int, bool]] = []
    failed: list[int] = []
    completed: list[int] = []              # writers that got all their items acknowledged
    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(per_writer):
                with order:
                    next_item[0] += 1
                    item = next_item[0]
                    try:
                        ticket = gc.enqueue(item)
                    except GroupCommitFailed:
                        failed.append(item)
                        return
                    assert ticket == item
                try:
                    gc.wait(ticket)
                except (GroupCommitFailed, OSError):
                    failed.append(item)
                    return
                with state:
                    acked.append((item, item in flushed_at))    # durable (its flush returned) first
            completed.append(1)
        except BaseException as exc:  # noqa: B902 - reported below
            errors.append(exc)

    ths = [threading.Thread(target=writer) for _ in range(writers)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    assert not errors and not any(th.is_alive() for th in ths)
    return gc, groups, flushed_at, acked, failed, len(completed)


@scaled(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writers=st.integers(1, 12), per_writer=st.integers(1, 12), delay=st.sampled_from([0.0, 0.0005, 0.002]),
       calls_handoff=st.booleans(), fail=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_leader_committer_matches_serial_model(writers, per_writer, delay, calls_handoff, fail):
    total = writers * per_writer
    fail_at = None if fail is None else 1 + int(fail * (total - 1))
    gc, groups, flushed_at, acked, failed, completed = _run(writers, per_writer, delay, calls_handoff, fail_at)
    seq = [i for g in groups for i in g]
    model = list(range(1, len(seq) + 1))
    assert seq == model                                   # each item once, in ticket order, groups contiguous
    assert all(ok for _, ok in acked)                     # durable (its flush returned) before it returned
    flushed = sorted(flushed_at)
    assert sorted(i for i, _ in acked) == flushed         # acknowledged = flushed
    if fail_at is None:
        assert flushed == list(range(1, total + 1)) and not failed
        assert gc.items == total and gc.groups == len(groups) and gc.failed is None
        assert gc.pending() == 0
    else:
        assert gc.failed is not None
        assert fail_at not in flushed_at and max(flushed, default=0) < fail_at
        # every writer ends on one failed item (its group's, or one queued after it), or had finished
        assert len(failed) + completed == writers and fail_at in failed and set(failed).isdisjoint(flushed)
        assert min(failed) == max(flushed, default=0) + 1
        with pytest.raises(GroupCommitFailed):
            gc.enqueue(0)


@pytest.mark.timeout(60)
def test_leader_committer_wakes_a_group_behind_the_next_append():
    """A flushed group's writer is not woken when its group's flush returns but just before the GIL
    is next given up: by a writer about to sleep, or by the next leader's handoff (just before its
    append); with no next group, at once."""
    gates = {2: threading.Event(), 3: threading.Event()}   # flush of the group ending at item k waits here
    before_handoff = threading.Event()
    leading = threading.Event()
    flushed = []

    def write_group(group, handoff):
        if group[-1] == 2:
            leading.set()
            gates[2].wait(10)
        else:
            before_handoff.set()
            gates[3].wait(10)        # encoding the next group: the previous group's writer still sleeps
        handoff()
        flushed.extend(group)

    gc = LeaderCommitter(write_group, timeout=10)
    returned = {}

    def waiter(ticket):
        gc.wait(ticket)
        returned[ticket] = list(flushed)

    assert gc.enqueue(1) == 1 and gc.enqueue(2) == 2
    lead = threading.Thread(target=waiter, args=(2,))      # leads the group [1, 2]
    lead.start()
    assert leading.wait(10)
    w1 = threading.Thread(target=waiter, args=(1,))        # a writer of that group
    w1.start()
    time.sleep(0.05)
    assert gc.enqueue(3) == 3
    w3 = threading.Thread(target=waiter, args=(3,))        # queued behind it: the next leader
    w3.start()
    time.sleep(0.05)
    gates[2].set()                                         # [1, 2] is durable
    assert before_handoff.wait(10)
    lead.join(10)
    assert 2 in returned                                   # the leader itself returns at once
    time.sleep(0.05)
    assert 1 not in returned and w1.is_alive()             # not woken when its group was settled
    assert gc.enqueue(4) == 4
    w4 = threading.Thread(target=waiter, args=(4,))        # a writer about to sleep wakes it
    w4.start()
    w1.join(10)
    assert not w1.is_alive() and returned[1] == [1, 2]     # woken before the next append
    gates[3].set()
    w3.join(10)
    w4.join(10)
    assert returned[3][:3] == [1, 2, 3] and returned[4] == [1, 2, 3, 4]

    # no next group: the writers are woken when their group is flushed
    gc2 = LeaderCommitter(lambda group, handoff: time.sleep(0.01))
    for _ in range(4):
        gc2.enqueue(None)
    ths = [threading.Thread(target=gc2.wait, args=(t,)) for t in (4, 1, 2, 3)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(10)
    assert not any(th.is_alive() for th in ths) and gc2.groups == 1 and gc2.pending() == 0
