"""The durable meta-service: every write is in the log before it is applied; restart = snapshot +
replay of the log after it; snapshots truncate the log; a damaged snapshot is refused."""
import threading

import pytest

from logtide._ext import wal
from logtide.engine.meta import DELETE, MetaService, cond, op
from logtide.engine.meta.service import SNAPSHOT_FILE
from logtide.errors import CorruptionError, LogtideError

from meta_clock import T0, ManualClock

pytestmark = pytest.mark.timeout(120)


def _workload(ms, clock, n=60):
    replies = []
    for i in range(n):
        clock.t += 37
        replies.append(ms.upsert(f"k/{i % 17}", f"v{i}".encode(), ttl_ms=(500 if i % 5 == 0 else None)))
        if i % 7 == 0:
            replies.append(ms.txn(conditions=[cond.prefix_count("k/", ">=", 3)],
                                  if_then=[op.fetch_add_u64("cnt", 1), op.put_sequential("q/", "qs", b"x")],
                                  else_then=[op.get("cnt")]))
        if i % 11 == 0:
            replies.append(ms.upsert(f"k/{(i + 3) % 17}", DELETE))
    return replies


def _state(ms):
    sm = ms._sm
    return sm.items(), sm.seq, sm.applied_index, sm.last_time_ms


def test_restart_replays_the_log_to_the_same_state(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        assert ms.durable
        _workload(ms, clock)
        before = _state(ms)
        assert ms.snapshots_taken == 0
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        assert _state(ms) == before
        _, r = ms.upsert("after", b"1")
        assert r.seq == before[1] + 1           # the global seq continues
        assert ms.applied_index == before[2] + 1


def test_snapshots_truncate_the_log_and_restart_loads_them(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=10) as ms:
        _workload(ms, clock, n=80)
        before = _state(ms)
        assert ms.snapshots_taken >= 5
        assert ms._log.get_truncated_lsn() >= before[2] - 10
        assert (tmp_path / "m" / SNAPSHOT_FILE).exists()
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=10) as ms:
        assert _state(ms) == before
        assert ms._sm.applied_index == before[2]


def test_a_failing_periodic_snapshot_does_not_fail_the_write_that_triggered_it(tmp_path):
    """The snapshot a writer takes after its write is best effort: while it cannot be written (its
    temp path is a directory) writes still succeed and stay durable; once it can, the next write's
    snapshot truncates the log, and a restart has every write."""
    clock = ManualClock()
    blocker = tmp_path / "m" / (SNAPSHOT_FILE + ".tmp")
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=5) as ms:
        blocker.mkdir()
        for i in range(20):
            _, r = ms.upsert(f"s/{i}", b"v%d" % i)
            assert r.data == b"v%d" % i
        assert ms.snapshots_taken == 0 and ms._log.get_truncated_lsn() == 0
        with pytest.raises(OSError):
            ms.snapshot()                       # asked for explicitly, the failure is the caller's
        blocker.rmdir()
        ms.upsert("s/after", b"x")
        assert ms.snapshots_taken == 1 and ms._log.get_truncated_lsn() == ms.applied_index
        before = _state(ms)
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=5) as ms:
        assert _state(ms) == before
        assert {k for k, _ in ms.list("s/")} == {f"s/{i}" for i in range(20)} | {"s/after"}


def test_explicit_snapshot_then_more_writes_then_restart(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        _workload(ms, clock, n=20)
        idx = ms.snapshot()
        assert idx == ms.applied_index and ms._log.get_truncated_lsn() == idx
        _workload(ms, clock, n=20)
        before = _state(ms)
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        assert _state(ms) == before


def test_log_time_stays_monotonic_across_restart(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        ms.upsert("a", b"1")
    clock.t -= 60_000                           # the machine's clock went back while down
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        _, r = ms.upsert("b", b"1", ttl_ms=10)
        assert r.meta.proposed_at_ms == T0 and r.meta.expire_at_ms == T0 + 10


def test_concurrent_writers_share_the_log_and_apply_in_lsn_order(tmp_path):
    with MetaService.open(tmp_path / "m") as ms:
        seqs, errors = [], []

        def writer(i):
            try:
                for j in range(40):
                    seqs.append(ms.upsert(f"w{i}/{j}", b"x")[1].seq)
                    ms.txn(if_then=[op.fetch_add_u64("n", 1)])
            except Exception as exc:  # surfaced below
                errors.append(exc)
        ts = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors and len(set(seqs)) == 320
        assert ms.get("n").data == b"320" and ms.seq == 640 and ms.applied_index == 640
        assert ms._log.get_latest_lsn() == 640
        before = _state(ms)
    with MetaService.open(tmp_path / "m") as ms:
        assert _state(ms) == before


def test_damaged_snapshot_is_refused_not_ignored(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=5) as ms:
        _workload(ms, clock, n=20)
    snap = tmp_path / "m" / SNAPSHOT_FILE
    raw = bytearray(snap.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    snap.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError):
        MetaService.open(tmp_path / "m")


def test_missing_snapshot_with_truncated_log_is_corruption(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock, snapshot_every=5) as ms:
        _workload(ms, clock, n=20)
    (tmp_path / "m" / SNAPSHOT_FILE).unlink()
    with pytest.raises(CorruptionError):
        MetaService.open(tmp_path / "m")


def test_a_directory_serves_one_service_at_a_time(tmp_path):
    with MetaService.open(tmp_path / "m") as ms:
        ms.upsert("a", b"1")
        with pytest.raises(LogtideError):
            MetaService.open(tmp_path / "m")
        assert ms.get("a").data == b"1"


def test_watch_on_a_durable_service(tmp_path):
    with MetaService.open(tmp_path / "m") as ms:
        w = ms.watch("a", "b")
        ms.upsert("a1", b"1")
        ms.txn(if_then=[op.put("a2", b"2"), op.delete("a1")])
        assert [(e.key, e.current is None) for e in w.drain()] == [("a1", False), ("a2", False), ("a1", True)]


def _segments(d):
    return sorted((d / "log").glob("*.log"))


def test_torn_log_tail_loses_only_the_torn_entry(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        for i in range(10):
            ms.upsert(f"k{i}", b"v%d" % i)
        before = ms._sm.items()
    seg = _segments(tmp_path / "m")[-1]
    raw = seg.read_bytes()
    end = wal.scan(raw, 0, int(seg.name[:20]))[3]  # where the frames end: pre-allocated zeros follow
    seg.write_bytes(raw[:end - 7])             # the last record is torn, as by a crash mid-write
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        assert ms._sm.items() == before[:-1]          # keys sort k0..k9: only k9 is gone
        assert ms.get("k9") is None and ms.get("k8").data == b"v8" and ms.seq == 9
        assert ms.upsert("k9", b"again")[1].seq == 10     # the seq goes on from what survived


def test_corrupt_log_record_is_refused_not_skipped(tmp_path):
    clock = ManualClock()
    with MetaService.open(tmp_path / "m", clock=clock) as ms:
        for i in range(10):
            ms.upsert(f"k{i}", b"value-%d" % i)
    seg = _segments(tmp_path / "m")[-1]
    raw = bytearray(seg.read_bytes())
    at = raw.find(b"k3")                        # inside a record in the middle of the log
    raw[at] ^= 0x20
    seg.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError):
        MetaService.open(tmp_path / "m")


def test_a_service_dropped_unclosed_is_collected_and_its_directory_reopens(tmp_path):
    """Its threads hold it weakly: dropping the last reference closes it (writes kept, lock gone)."""
    import weakref
    from lifetime import collected, run_threads, thread_names, threads_back_to
    before = thread_names("meta-", "logservice-")
    for i in range(5):
        ms = MetaService.open(tmp_path / "meta")
        run_threads(8, lambda j: ms.upsert(f"k{i}/{j}", b"v"))
        ref = weakref.ref(ms)
        del ms
        assert collected(ref), "the dropped service stayed alive"
    assert threads_back_to(before, "meta-", "logservice-")
    with MetaService.open(tmp_path / "meta") as ms:
        assert sorted(k for k, _ in ms.list("k")) == sorted(f"k{i}/{j}" for i in range(5) for j in range(8))
