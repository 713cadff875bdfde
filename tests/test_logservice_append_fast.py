"""LogService.append's one-call Cython path (CommitQueue.append_user) against the general Python path:
the same arguments give the same LSN or the same typed error, and the same stored record."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled
from child_output import rest_of_output

from logtide import LogService
from logtide.engine.logservice.record import LogRecord

pytestmark = pytest.mark.timeout(120)

MAX = 64  # max_record_size: 52 bytes of payload after the 12-byte header

payloads = st.one_of(st.binary(max_size=60), st.binary(max_size=60).map(bytearray),
                     st.binary(max_size=60).map(memoryview), st.just("text"), st.none(),
                     st.binary(max_size=20).map(lambda d: LogRecord(0, 1, d)))
replicas = st.one_of(st.integers(-2, 3), st.integers(2**64 - 2, 2**64 + 1), st.booleans(), st.just(1.0))
types = st.one_of(st.just(0), st.integers(0, 3), st.integers(-1, -1), st.just(2**32), st.just(True))


def outcome(fn):
    try:
        return fn()
    except Exception as exc:  # the model compares which typed error
        return type(exc)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    fast = LogService.open(tmp_path_factory.mktemp("fast"), max_record_size=MAX, truncation_interval=0, fsync="never")
    general = LogService.open(tmp_path_factory.mktemp("general"), max_record_size=MAX, truncation_interval=0, fsync="never")
    yield fast, general
    fast.close()
    general.close()


@scaled(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(payloads, replicas, types), min_size=1, max_size=12))
def test_fast_append_matches_the_general_path(pair, calls):
    fast, general = pair
    assert fast.append is not LogService.append  # the Cython call is bound
    first = fast.get_latest_lsn() + 1
    assert first == general.get_latest_lsn() + 1
    for payload, rid, rtype in calls:
        got = outcome(lambda: fast.append(payload, replica_id=rid, type=rtype))
        want = outcome(lambda: LogService.append(general, payload, rid, rtype))
        assert got == want, (payload, rid, rtype)
    assert fast.get_latest_lsn() == general.get_latest_lsn()
    if fast.get_latest_lsn() >= first:
        a, _ = fast.read(first, 1 << 20)
        b, _ = general.read(first, 1 << 20)
        assert [(r.lsn, r.type, r.data) for r in a] == [(r.lsn, r.type, r.data) for r in b]


def test_fast_append_after_close_is_refused(tmp_path):
    from logtide.errors import LogServiceClosed
    svc = LogService.open(tmp_path)
    assert svc.append(b"a", replica_id=3) == 1
    svc.close()
    with pytest.raises(LogServiceClosed):
        svc.append(b"b")


# --- the writer's fast paths against a list model ----------------------------------------------------
# A lone appender with fsync="batch"/"never" writes its record itself when the log is idle, and the
# flusher indexes and publishes groups in Cython, handing to Python only groups that roll a segment,
# reach the pre-allocation mark or fill the index. Small segments make every boundary frequent;
# bursts from several threads queue appends behind a lone appender's write.

sizes = st.integers(0, 300)
ops = st.one_of(
    st.tuples(st.just("append"), sizes),
    st.tuples(st.just("many"), st.lists(sizes, min_size=1, max_size=5)),
    st.tuples(st.just("burst"), st.integers(2, 5), st.integers(1, 6)),
    st.tuples(st.just("read"), st.floats(0, 1)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("reopen")),
)


def _data(tag: int, n: int) -> bytes:
    return (b"%d." % tag * (n // 2 + 1))[:n]


def _read_from(svc, lsn: int) -> list:
    """(lsn, replica id, payload) of every record from lsn on (a read stops at a segment's end)."""
    out = []
    while lsn <= svc.get_latest_lsn():
        recs, lsn = svc.read(lsn, 1 << 20)
        out += [(r.lsn, r.replica_id, r.payload) for r in recs]
    return out


@pytest.mark.parametrize("fsync", ["never", "batch", "always"])
@scaled(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(ops, min_size=1, max_size=25))
def test_writer_fast_paths_match_a_list_model(tmp_path_factory, fsync, script):
    import threading
    path = tmp_path_factory.mktemp("model")
    opened = dict(fsync=fsync, segment_size=2048, max_record_size=1024, truncation_interval=0)
    svc = LogService.open(path, **opened)
    model: list[tuple[int, bytes]] = []   # (replica id, payload) of LSN k + 1
    tag = 0
    direct = 0
    try:
        for op in script:
            if op[0] == "append":
                tag += 1
                assert svc.append(_data(tag, op[1]), replica_id=tag) == len(model) + 1
                model.append((tag, _data(tag, op[1])))
            elif op[0] == "many":
                tag += 1
                ps = [_data(tag * 10 + k, n) for k, n in enumerate(op[1])]
                assert svc.append_many(ps, replica_id=tag) == len(model) + 1
                model += [(tag, p) for p in ps]
            elif op[0] == "burst":
                got: dict[int, tuple[int, bytes]] = {}
                errors = []

                def body(t, k=op[2], base=tag):
                    try:
                        for i in range(k):
                            rid, p = base + 1 + t, _data(1000 * (base + 1 + t) + i, 40 + 7 * i)
                            got[svc.append(p, replica_id=rid)] = (rid, p)
                    except Exception as exc:  # reported below
                        errors.append(exc)
                ths = [threading.Thread(target=body, args=(t,)) for t in range(op[1])]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
                assert not errors
                tag += op[1]
                assert sorted(got) == list(range(len(model) + 1, len(model) + 1 + len(got)))  # dense, unique
                model += [got[k] for k in sorted(got)]
            elif op[0] == "read":
                if model:
                    lsn = 1 + int(op[1] * (len(model) - 1))
                    assert _read_from(svc, lsn) == [(k + 1, *model[k]) for k in range(lsn - 1, len(model))]
            elif op[0] == "sync":
                svc.sync()
                assert svc.stats()["synced_lsn"] == len(model)
            else:
                direct += svc.stats()["direct_writes"]
                svc.close()
                svc = LogService.open(path, **opened)
            assert svc.get_latest_lsn() == len(model)
        direct += svc.stats()["direct_writes"]
        if fsync == "always":
            assert direct == 0  # every append waits for its group's fdatasync
            assert svc.stats()["synced_lsn"] == len(model)
    finally:
        svc.close()
    with LogService.open(path, **opened) as again:
        assert again.get_latest_lsn() == len(model)
        assert [rec[1:] for rec in _read_from(again, 1)] == model


def test_lone_appender_writes_itself_and_batch_syncs_on_time(tmp_path):
    """fsync="never"/"batch": a lone appender's records are written by its own call (the flusher
    never takes a group), and with "batch" they are fdatasync'ed within the batch interval after."""
    import time
    for fsync in ("never", "batch"):
        with LogService.open(tmp_path / fsync, fsync=fsync, truncation_interval=0) as svc:
            before = svc.stats()
            for i in range(200):
                assert svc.append(b"x%d" % i) == i + 1
            st_ = svc.stats()
            assert st_["direct_writes"] - before["direct_writes"] >= 150  # a few may meet a mark
            assert st_["latest_lsn"] == 200
            if fsync == "batch":
                deadline = time.monotonic() + 10
                while svc.stats()["synced_lsn"] < 200:
                    assert time.monotonic() < deadline, "the batch sync did not come"
                    time.sleep(0.005)


KILL_CHILD = r"""
import sys, threading, time
from logtide import LogService
path, fsync, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3])
svc = LogService.open(path, fsync=fsync, segment_size=32 << 10)  # small segments: kills land on rolls too
lock = threading.Lock()
def work(t):
    i = 0
    while True:
        lsn = svc.append(b"t%d-i%d|" % (t, i) * (1 + i % 9), replica_id=t)
        with lock:  # acknowledged: append returned
            sys.stdout.write("%d %d %d\n" % (lsn, t, i))
            sys.stdout.flush()
        i += 1
        if t and i % 50 == 0:
            time.sleep(0.002)  # the extra threads come and go: the lone appender's path and groups mix
print("ready", flush=True)
for t in range(nthreads):
    threading.Thread(target=work, args=(t,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("fsync,nthreads", [("never", 1), ("batch", 3)])
def test_sigkill_keeps_every_acknowledged_append_of_a_lone_appender(tmp_path, fsync, nthreads):
    """SIGKILL (the page cache survives a process kill): every append acknowledged by its own write
    or by the flusher is in the reopened log, byte for byte, with no LSN gap."""
    import random
    import signal
    import subprocess
    import sys
    import time
    path = str(tmp_path / "log")
    rnd = random.Random(13)
    for round_ in range(3):
        p = subprocess.Popen([sys.executable, "-c", KILL_CHILD, path, fsync, str(nthreads)],
                             stdout=subprocess.PIPE, text=True, cwd=str(tmp_path))
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.2, 0.6))
        p.send_signal(signal.SIGKILL)
        out = rest_of_output(p, 60)
        acked = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3:  # the last line may be cut by the kill
                lsn, t, i = map(int, parts)
                acked[lsn] = (t, b"t%d-i%d|" % (t, i) * (1 + i % 9))
        assert len(acked) > 100, f"round {round_}: too few appends before the kill"
        with LogService.open(path, fsync=fsync, segment_size=32 << 10) as svc:
            got = {lsn: (rid, data) for lsn, rid, data in _read_from(svc, svc.get_first_lsn())}
            assert sorted(got) == list(range(min(got), max(got) + 1))  # no gap
            missing = [lsn for lsn in acked if got.get(lsn) != acked[lsn]]
            assert not missing, f"round {round_}: acknowledged LSNs lost or changed: {missing[:5]}"


@pytest.mark.parametrize("fsync", ["never", "batch"])
def test_sync_returns_under_continuous_appends(tmp_path, fsync):
    """sync() while appenders never let the log go idle (groups back to back in the flusher's loop,
    and lone-appender writes): the request is served after the group it arrived with, not lost."""
    import threading
    from logtide.errors import LogServiceClosed
    with LogService.open(tmp_path, fsync=fsync, truncation_interval=0) as svc:
        stop = threading.Event()

        def spin(t):
            try:
                while not stop.is_set():
                    svc.append(b"s" * 64, replica_id=t)
            except LogServiceClosed:
                pass
        ths = [threading.Thread(target=spin, args=(t,)) for t in range(3)]
        for th in ths:
            th.start()
        try:
            for _ in range(20):
                target = svc.get_latest_lsn()
                svc.sync()
                assert svc.stats()["synced_lsn"] >= target
        finally:
            stop.set()
            for th in ths:
                th.join()
