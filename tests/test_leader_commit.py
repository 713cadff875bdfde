"""The leader group committer (engine/group_commit/leader.py) against a serial model, driven by many threads.

The serial model: every item is appended once, in ticket order, and its writer returns after it was
appended. Hypothesis chooses the writers, their items, the flush's time, and a group that fails.
Checked: the flushed sequence is the model's (a prefix of it when a group fails), groups are
contiguous runs of tickets, every writer returns only after its own group's flush returned, and a
failure fails its group and everything after it, never a flushed item. Then: a written group's
writers all return though none of them waits again, the next leader is named when the group ahead
is written, and a writer whose deadline passes gets GroupCommitTimeout without stranding the rest.
"""
import threading
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.group_commit import LeaderCommitter
from logtide.errors import GroupCommitFailed


def _run(writers: int, per_writer: int, delay: float, fail_at: int | None):
    groups: list[list[int]] = []
    flushed_at: dict[int, int] = {}        # item -> index of its group (set once its flush returned)
    state = threading.Lock()

    def write_group(group):
        g = len(groups)
        groups.append(list(group))
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
       fail=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_leader_committer_matches_serial_model(writers, per_writer, delay, fail):
    total = writers * per_writer
    fail_at = None if fail is None else 1 + int(fail * (total - 1))
    gc, groups, flushed_at, acked, failed, completed = _run(writers, per_writer, delay, fail_at)
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
def test_a_written_group_wakes_all_its_writers_and_names_the_next_leader():
    """Writers of one group return together when its write returns, though none of them waits
    again (nobody wakes the next: one wake for the group); the first writer queued behind it leads
    the next group, which holds everything queued meanwhile."""
    gates = {2: threading.Event(), 5: threading.Event()}
    leading = threading.Event()
    groups = []

    def write_group(group):
        groups.append(list(group))
        if group[-1] == 2:
            leading.set()
        gates[group[-1]].wait(10)

    gc = LeaderCommitter(write_group, timeout=10)
    returned = {}

    def waiter(ticket):
        gc.wait(ticket)
        returned[ticket] = threading.get_ident()

    for k in (1, 2):
        assert gc.enqueue(k) == k
    lead = threading.Thread(target=waiter, args=(2,))          # leads the group [1, 2]
    lead.start()
    assert leading.wait(10)
    w1 = threading.Thread(target=waiter, args=(1,))            # a writer of that group
    w1.start()
    for k in (3, 4, 5):
        assert gc.enqueue(k) == k                              # queued behind it
    behind = [threading.Thread(target=waiter, args=(t,)) for t in (3, 4, 5)]
    for th in behind:
        th.start()
    time.sleep(0.1)
    assert not returned and gc.pending() == 5
    gates[2].set()                                             # [1, 2] written
    lead.join(10)
    w1.join(10)
    assert 1 in returned and 2 in returned and not any(t in returned for t in (3, 4, 5))
    gates[5].set()
    for th in behind:
        th.join(10)
    assert sorted(returned) == [1, 2, 3, 4, 5]
    assert groups == [[1, 2], [3, 4, 5]] and gc.groups == 2 and gc.pending() == 0


@pytest.mark.timeout(60)
def test_a_writer_past_its_deadline_times_out_and_the_rest_still_commit():
    """The writer queued first behind a stuck group (the one to lead next) gives up at its deadline
    with GroupCommitTimeout; when the group is written, the writers queued behind are still led."""
    from logtide.errors import GroupCommitTimeout
    release = threading.Event()
    groups = []

    def write_group(group):
        groups.append(list(group))
        if group == ["a"]:
            release.wait(20)

    gc = LeaderCommitter(write_group, timeout=0.3)
    gc.enqueue("a")
    lead = threading.Thread(target=gc.wait, args=(1,))
    lead.start()
    while not groups:
        time.sleep(0.005)
    gc.enqueue("b")
    with pytest.raises(GroupCommitTimeout):
        gc.wait(2)                                             # the candidate: the group ahead is stuck
    gc.timeout = 10
    gc.enqueue("c")
    other = threading.Thread(target=gc.wait, args=(3,))
    other.start()
    time.sleep(0.05)
    release.set()
    lead.join(10)
    other.join(10)
    assert not other.is_alive() and gc.pending() == 0
    assert groups == [["a"], ["b", "c"]]
    gc.wait(2)                                                 # its item was written all the same
