"""WatchHistory and watches that resume after a cursor, in process: the changes after a cursor
come back in apply order with their cursors, whole entries are dropped from the old end, and a
cursor whose following changes are gone (dropped, or before a snapshot) is MetaWatchCompacted,
never a silent gap. Checked against a plain list of every change."""
import io

import pytest

from logtide.engine.meta import DELETE, MetaService, op
from logtide.engine.meta.command import TxnCmd, UpsertCmd
from logtide.engine.meta.log_entry import encode_entry
from logtide.engine.meta.replica_state_machine import ReplicaStateMachine
from logtide.engine.meta.watch_history import WatchHistory
from logtide.engine.statemachine import Entry
from logtide.errors import MetaInvalidArgument, MetaWatchCompacted


def _apply(rsm, index, cmd, t=1000):
    rsm.update(Entry(index, encode_entry(t, cmd)))


def _changes(rsm):
    """Every change of the state machine, as (index, pos, key, current data), in apply order."""
    seen = []
    rsm.sm.subscribe(lambda index, ch: seen.extend((index, p, k, c.data if c else None)
                                                   for p, (k, _prev, c) in enumerate(ch)), indexed=True)
    return seen


def test_resume_after_any_cursor_gives_exactly_the_later_changes():
    rsm = ReplicaStateMachine()
    every = _changes(rsm)
    index = 0
    for n in range(40):
        index += 2          # Raft indexes are not dense (its own entries sit between)
        if n % 5 == 4:
            _apply(rsm, index, TxnCmd(if_then=(op.put("a", b"t%d" % n), op.put("b", b"t%d" % n))))
        elif n % 7 == 6:
            _apply(rsm, index, UpsertCmd("a", DELETE))
        else:
            _apply(rsm, index, UpsertCmd("a" if n % 2 else "b", b"v%d" % n))
    for i, (idx, pos, _k, _v) in enumerate(every):
        with rsm.lock:
            w = _start(rsm, "", "\uffff", (idx, pos))
        got = [(e.index, e.pos, e.key, e.current.data if e.current else None) for e in w.drain()]
        assert got == every[i + 1:]
        w.close()


def _start(rsm, key, key_end, after):
    from logtide.engine.meta.watch import start_watch
    return start_watch(rsm.hub, rsm.sm, key, key_end, "all", False, 0, after)


def test_dropped_entries_and_a_snapshot_make_old_cursors_compacted():
    h = WatchHistory(max_events=5)
    for index in range(1, 5):
        h.add(index, [("k%d" % index, None, None), ("j%d" % index, None, None)])   # two changes per entry
    assert h.floor == 2                          # entries 1 and 2 dropped whole, 3 and 4 kept
    assert [e[:2] for e in h.after((3, 0))] == [(3, 1), (4, 0), (4, 1)]
    with pytest.raises(MetaWatchCompacted):
        h.after((2, 0))                          # the rest of entry 2 is gone
    with pytest.raises(MetaWatchCompacted):
        h.after((1, 1))
    h.reset(10)                                  # a snapshot at entry 10 replaced the state
    with pytest.raises(MetaWatchCompacted):
        h.after((4, 1))
    assert h.after((11, 0)) == []                # a cursor this replica has not reached yet: nothing to replay


def test_the_history_is_bounded_in_bytes_too():
    from logtide.engine.meta.seqv import SeqV
    h = WatchHistory(max_bytes=10_000)
    for index in range(1, 101):
        h.add(index, [("k", None, SeqV(index, b"x" * 1000))])
    kept = h.after((h.floor + 1, 0))
    assert 5 <= len(kept) + 1 <= 10 and h.floor > 90
    with pytest.raises(MetaWatchCompacted):
        h.after((1, 0))


def test_a_snapshot_install_ends_watches_and_empties_the_history():
    src = ReplicaStateMachine()
    for i in range(1, 6):
        _apply(src, i, UpsertCmd("k", b"%d" % i))
    buf = io.BytesIO()
    src.save_snapshot(buf)
    rsm = ReplicaStateMachine()
    _apply(rsm, 1, UpsertCmd("k", b"1"))
    with rsm.lock:
        w = _start(rsm, "k", None, (1, 0))
    buf.seek(0)
    rsm.recover_from_snapshot(buf)
    assert w.closed
    with pytest.raises(MetaWatchCompacted):
        with rsm.lock:
            _start(rsm, "k", None, (3, 0))


def test_bad_cursors_and_a_service_without_history():
    rsm = ReplicaStateMachine()
    for bad in [(-1, 0), (1,), "1,0", (1, 0.5), (True, 0)]:
        with pytest.raises(MetaInvalidArgument):
            _start(rsm, "k", None, bad)
    with MetaService.in_memory() as ms:
        with pytest.raises(MetaInvalidArgument):
            ms.watch("k", after=(1, 0))          # one process keeps no history to resume from
