"""FramedWal (the WAL in frames, for the replicated log) against a simple model, with hypothesis:
over a real embedded log, random group commits, primaries reopening (new epochs), frames of a dead
primary arriving after a newer one opened, truncations and reader reports. Every view (the writer,
a reader that follows the tail, a fresh reader) reads exactly the model's records; truncation and
reader holds are never looser than asked."""
import itertools

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logservice import LogService
from logtide.errors import CorruptionError, WalGoneError
from logtide.replay.wal_frames import KIND_RECORDS, FramedWal, encode_frame

_dirs = itertools.count()

ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(1, 300), min_size=1, max_size=6)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("stale"), st.integers(1, 4), st.integers(0, 5)),
    st.tuples(st.just("truncate"), st.integers(0, 60)),
    st.tuples(st.just("report"), st.integers(0, 60)),
), min_size=1, max_size=25)


def _read_all(view, start):
    out, w = [], start
    while True:
        got = view.read_records(w, 700)
        if not got:
            return out
        assert [l for l, _ in got] == list(range(w, w + len(got)))
        out += got
        w = got[-1][0] + 1


@pytest.mark.timeout(300)
@scaled(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
# found with 10x examples (issue 23): a fenced primary's late frame served as WAL after truncation
@example(ops=[("reopen",), ("append", [1, 1]), ("stale", 2, 0), ("reopen",), ("append", [1]), ("report", 2), ("truncate", 2)])
def test_framed_wal_matches_a_model(tmp_path, ops):
    log = LogService.open(tmp_path / f"log{next(_dirs)}")
    try:
        writer = FramedWal(log, writer=True)
        follower = FramedWal(log, writer=False)
        old_epochs = []
        model = {}            # WAL LSN -> record
        truncated = reported = 0
        n = 0
        log.register_reader("ro-1", 0)
        for op in ops:
            if op[0] == "append":
                recs = [bytes([n % 251]) * size + b"#%d" % (n + k) for k, size in enumerate(op[1])]
                first = writer.append_many(recs)
                assert first == len(model) + 1
                model.update({first + k: r for k, r in enumerate(recs)})
                n += len(recs)
            elif op[0] == "reopen":   # a new primary: a new epoch, the same WAL
                old_epochs.append((writer._my_epoch, len(model) + 1))   # its epoch, its next WAL LSN
                writer = FramedWal(log, writer=True)
                assert writer.get_latest_lsn() == len(model)
            elif op[0] == "stale" and old_epochs:   # a dead primary's append lands after a newer one opened
                epoch, nxt = old_epochs[op[2] % len(old_epochs)]
                log.append(encode_frame(KIND_RECORDS, epoch, nxt, [b"stale"] * op[1]))
            elif op[0] == "truncate":
                before = writer.get_truncated_lsn()
                writer.truncate(op[1])
                truncated = writer.get_truncated_lsn()
                assert before <= truncated <= max(before, op[1])
                assert truncated < len(model) or not model   # the newest frame stays
            elif op[0] == "report" and op[1] <= len(model):
                writer.report_replayed("ro-1", op[1])
                reported = max(reported, op[1])   # a reader's LSN only moves up
                # never looser than asked (what is truncated is gone anyway)
                assert writer.readers()["ro-1"] <= max(reported, truncated)
            # every view reads the model, from anywhere not truncated
            fresh = FramedWal(log, writer=False)
            for view in (writer, follower, fresh):
                assert view.get_latest_lsn() == len(model)
                start = view.get_first_lsn()
                assert start <= truncated + 1 or not model
                want = [(w, model[w]) for w in range(max(start, 1), len(model) + 1)]
                assert _read_all(view, max(start, 1)) == want
            if truncated > 0 and fresh.get_first_lsn() > 1:
                with pytest.raises(WalGoneError):
                    fresh.read_records(fresh.get_first_lsn() - 1, 100)
        assert writer.readers()["ro-1"] <= len(model)
    finally:
        log.close()


def test_a_newer_primary_fences_an_older_one_out(tmp_path):
    """Frames of the older epoch written after the newer primary opened are never read."""
    log = LogService.open(tmp_path / "log")
    try:
        a = FramedWal(log, writer=True)
        a.append_many([b"a1", b"a2"])
        b = FramedWal(log, writer=True)
        a.append_many([b"from the dead"])     # lands after b's fence
        b.append_many([b"b3"])
        r = FramedWal(log, writer=False)
        assert r.read_records(1, 1 << 20) == [(1, b"a1"), (2, b"a2"), (3, b"b3")]
        assert r.stale_frames == 1
    finally:
        log.close()


def test_a_fence_holds_after_the_frames_that_set_it_are_truncated(tmp_path):
    """A dead primary's late frame that lands before a third primary opens, and ends exactly where
    the live WAL goes on: once the fence and frames of the primary that fenced it are truncated, a
    new reader must still refuse it (WalGoneError), not serve it as WAL LSNs 1 and 2."""
    log = LogService.open(tmp_path / "log")
    try:
        a = FramedWal(log, writer=True)
        b = FramedWal(log, writer=True)                 # fences a out
        b.append_many([b"B-rec-1", b"B-rec-2"])         # WAL 1, 2
        log.append(encode_frame(KIND_RECORDS, a._my_epoch, 1, [b"STALE-from-A"] * 2))
        c = FramedWal(log, writer=True)
        c.append_many([b"C-rec-3"])
        c.truncate(2)                                   # b's fence and frame go
        assert c.get_first_lsn() == 3
        r = FramedWal(log, writer=False)
        assert r.get_first_lsn() == 3 and r.get_latest_lsn() == 3
        assert r.read_records(3, 700) == [(3, b"C-rec-3")]
        for gone in (1, 2):
            with pytest.raises(WalGoneError):
                r.read_records(gone, 700)
        # a primary that opens now knows the stale frame is not WAL either
        d = FramedWal(log, writer=True)
        assert d.get_first_lsn() == 3 and d.read_records(3, 700) == [(3, b"C-rec-3")]
        assert d.append_many([b"D-rec-4"]) == 4
        assert FramedWal(log, writer=False).read_records(3, 700) == [(3, b"C-rec-3"), (4, b"D-rec-4")]
    finally:
        log.close()


def test_a_foreign_record_is_corruption(tmp_path):
    log = LogService.open(tmp_path / "log")
    try:
        log.append(b"not a frame at all")
        with pytest.raises(CorruptionError):
            FramedWal(log, writer=False)
    finally:
        log.close()
