"""Pre-allocated segments: zeros written ahead of the frames, the next segment prepared in the
background. The logical end (where only zeros remain) is the clean end of the log; a torn frame in
the zeros is cut, a valid frame after a hole is corruption, a crash while the next segment is being
prepared loses nothing, and a disk limit hit while pre-allocating is no data loss."""
from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from logtide import CorruptLogError, LogService
from logtide._ext import wal
from logtide.engine.logservice.log_format import PREALLOC_FILE, PREFILL_MIN
from child_output import rest_of_output
from queue_flusher import QueueFlusher

pytestmark = pytest.mark.timeout(180)

FRAME = 20 + 12 + 40  # one record of make_log


def segments(path) -> list[str]:
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))


def make_log(path, n=50, segment_size=64 << 20):
    with LogService.open(path, segment_size=segment_size) as svc:
        for i in range(n):
            svc.append(bytes([i % 256]) * 40)
    return segments(path)


def frames_end(path) -> int:
    """The logical end of a segment file, checking that only zeros follow it."""
    with open(path, "rb") as f:
        raw = f.read()
    end, status = wal.scan(raw, 0, int(os.path.basename(path)[:20]))[3:]
    assert status == wal.OK and raw[end:] == bytes(len(raw) - end)
    return end


def payloads(svc):
    recs, lsn = [], svc.get_first_lsn()
    while lsn <= svc.get_latest_lsn():
        got, lsn = svc.read(lsn, 1 << 20)
        recs += got
    return [r.payload for r in recs]


def wait_for(cond, what, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_segments_are_zero_filled_ahead_and_read_by_their_logical_end(tmp_path, caplog):
    size = 64 << 10
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path, segment_size=size) as svc:
            svc.append(b"first")
            (seg,) = segments(tmp_path)
            wait_for(lambda: os.path.getsize(seg) == size, "the first segment filled with zeros to its size")
            assert frames_end(seg) == FRAME - 40 + 5
            wait_for(lambda: os.path.exists(tmp_path / PREALLOC_FILE), "the next segment prepared")
            for i in range(3000):
                svc.append(bytes([i % 251]) * 40)
            segs = segments(tmp_path)
            assert len(segs) >= 3
            for s in segs[:-1]:  # a sealed segment ends with its last group: no zeros left in it
                assert os.path.getsize(s) == frames_end(s) >= size
            assert svc.stats()["prealloc_errors"] == 0
            want = [b"first"] + [bytes([i % 251]) * 40 for i in range(3000)]
            assert payloads(svc) == want
        assert not os.path.exists(tmp_path / PREALLOC_FILE)  # close discards the unused file
        with LogService.open(tmp_path, segment_size=size) as svc:  # the zero tail is no damage
            assert payloads(svc) == want
            assert svc.append(b"more") == 3002
            last = segments(tmp_path)[-1]
            wait_for(lambda: os.path.getsize(last) == size, "the last segment filled to its size")
        assert 0 < frames_end(last) < os.path.getsize(last)
    assert "torn" not in caplog.text and "pre-allocation" not in caplog.text


def test_a_new_log_stays_small(tmp_path):
    with LogService.open(tmp_path) as svc:  # 64 MiB segments, one record
        svc.append(b"x")
        (seg,) = segments(tmp_path)
        wait_for(lambda: os.path.getsize(seg) >= PREFILL_MIN, "the first MiB of zeros")
    assert PREFILL_MIN <= os.path.getsize(seg) <= PREFILL_MIN + 100  # 1 MiB ahead of the end, no more


def test_zero_tail_of_any_length_is_the_clean_end(tmp_path, caplog):
    (seg,) = make_log(tmp_path)
    end = frames_end(seg)
    for extra in (1, 19, 20, 21, 5000):
        with open(seg, "r+b") as f:
            f.truncate(end)
            f.seek(end)
            f.write(bytes(extra))
        with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
            with LogService.open(tmp_path) as svc:
                assert svc.get_latest_lsn() == 50
        assert "torn" not in caplog.text
    with LogService.open(tmp_path) as svc:  # the next record goes at the logical end, not after the zeros
        assert svc.append(b"next") == 51
    assert frames_end(seg) == end + 20 + 12 + 4


@pytest.mark.parametrize("torn", [1, 7, 20, 31, FRAME - 1])
def test_torn_frame_followed_by_zeros_is_cut(tmp_path, caplog, torn):
    (seg,) = make_log(tmp_path, n=51)
    end = frames_end(seg)
    with open(seg, "r+b") as f:  # frame 51 half written into the zeros: its tail is still zero
        f.seek(end - FRAME + torn)
        f.write(bytes(FRAME - torn))
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path) as svc:
            assert svc.get_latest_lsn() == 50
            assert payloads(svc) == [bytes([i]) * 40 for i in range(50)]
            assert svc.append(b"after") == 51
    assert "cut a torn tail" in caplog.text
    with LogService.open(tmp_path) as svc:
        assert payloads(svc)[-1] == b"after"
    assert frames_end(seg) == 50 * FRAME + 20 + 12 + 5


def test_garbage_in_the_zeros_is_cut(tmp_path, caplog):
    (seg,) = make_log(tmp_path)
    end = frames_end(seg)
    with open(seg, "r+b") as f:
        f.seek(end + 4096)
        f.write(os.urandom(100))
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path) as svc:
            assert svc.get_latest_lsn() == 50
    assert "cut a torn tail" in caplog.text
    assert frames_end(seg) == end


def test_valid_frame_after_a_hole_of_zeros_is_corruption(tmp_path):
    (seg,) = make_log(tmp_path)
    with open(seg, "rb") as f:
        raw = f.read()
    size = len(raw)
    last = raw[49 * FRAME: 50 * FRAME]
    with open(seg, "r+b") as f:  # frame 50 lost (zeros) but frame 51 written after it: a hole
        f.seek(49 * FRAME)
        f.write(bytes(FRAME))
        frame51, _ = wal.encode(51, 0, last[20:32], [b"y" * 40])
        f.write(frame51)
    with pytest.raises(CorruptLogError) as err:
        LogService.open(tmp_path)
    assert err.value.offset == 49 * FRAME and "followed by a valid record" in str(err.value)
    assert os.path.getsize(seg) == size  # nothing was cut


def test_leftover_half_prepared_next_segment_is_discarded(tmp_path, caplog):
    make_log(tmp_path, n=300, segment_size=4096)
    with open(tmp_path / PREALLOC_FILE, "wb") as f:  # a crash while the next segment was being filled
        f.write(bytes(3000) + os.urandom(77))
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(tmp_path, segment_size=4096) as svc:
            assert payloads(svc) == [bytes([i % 256]) * 40 for i in range(300)]
            assert svc.append(b"z") == 301
    assert "torn" not in caplog.text
    assert not os.path.exists(tmp_path / PREALLOC_FILE)


@pytest.mark.parametrize("zeros", [0, 100, 4096])
def test_crash_after_the_prepared_segment_was_renamed(tmp_path, zeros):
    """The roll renamed the prepared file to the new segment's name, and the process died before
    writing a frame there: an empty (zero-filled, perhaps half-filled) last segment."""
    make_log(tmp_path, n=300, segment_size=4096)
    with LogService.open(tmp_path, segment_size=4096) as svc:
        latest = svc.get_latest_lsn()
    nxt = tmp_path / f"{latest + 1:020d}.log"  # (a roll may have created it already: then it is replaced)
    segs = set(segments(tmp_path)) | {str(nxt)}
    with open(nxt, "wb") as f:
        f.write(bytes(zeros))
    with LogService.open(tmp_path, segment_size=4096) as svc:
        assert svc.get_latest_lsn() == latest and set(segments(tmp_path)) == segs
        assert svc.append(b"into the new segment") == latest + 1
        assert svc.read(latest + 1, 100)[0][0].payload == b"into the new segment"
    assert frames_end(str(nxt)) == 20 + 12 + 20


KILL_CHILD = textwrap.dedent("""
    import sys, threading
    from logtide import LogService
    path, rnd = sys.argv[1], int(sys.argv[2])
    svc = LogService.open(path, segment_size=16 << 10)  # rolls and next-segment preparations all the time
    lock = threading.Lock()
    def work(t):
        i = 0
        while True:
            lsn = svc.append(b"%d-%d-%d|" % (rnd, t, i) * (1 + i % 20), replica_id=t)
            with lock:
                sys.stdout.write("%d %d %d\\n" % (lsn, t, i))
                sys.stdout.flush()
            i += 1
    print("ready", flush=True)
    for t in range(4):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def test_sigkill_with_preallocated_segments(tmp_path):
    """Real SIGKILLs of a process appending into pre-allocated segments (small ones: kills land
    while zeros are written ahead, while the next segment is prepared, and on rolls)."""
    rng = random.Random(1313)
    path = str(tmp_path / "log")
    acked: dict[int, bytes] = {}
    preallocated = 0
    for rnd in range(8):
        p = subprocess.Popen([sys.executable, "-c", KILL_CHILD, path, str(rnd)], stdout=subprocess.PIPE,
                             cwd=str(tmp_path), text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.05, 0.4))
        finally:
            os.kill(p.pid, signal.SIGKILL)
            out = rest_of_output(p)
        assert p.returncode == -signal.SIGKILL
        for line in out.split("\n")[:-1]:  # the last line may be torn by the kill
            lsn, t, i = map(int, line.split())
            assert lsn not in acked
            acked[lsn] = b"%d-%d-%d|" % (rnd, t, i) * (1 + i % 20)
        last = segments(path)[-1]
        preallocated += os.path.getsize(last) > frames_end(last)
        with LogService.open(path, segment_size=16 << 10) as svc:
            assert svc.get_latest_lsn() >= max(acked)
            lsn = 1
            while lsn <= svc.get_latest_lsn():
                recs, nxt = svc.read(lsn, 1 << 20)
                assert [r.lsn for r in recs] == list(range(lsn, nxt))  # dense, no hole
                for r in recs:
                    if r.lsn in acked:
                        assert r.payload == acked[r.lsn], f"round {rnd}: LSN {r.lsn} differs"
                lsn = nxt
        for s in segments(path):
            frames_end(s)  # every segment: frames, then only zeros
    assert len(acked) > 100 and preallocated > 0


FSIZE_CHILD = textwrap.dedent("""
    import resource, signal, sys, threading
    from logtide import LogService
    from logtide.errors import LogServiceFailed
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
    path, limit = sys.argv[1], int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    svc = LogService.open(path)   # its first pre-allocation (1 MiB of zeros) hits the limit
    acked, failures = [], []
    def work(t):
        try:
            for i in range(100000):
                lsn = svc.append(b"%d-%d" % (t, i) * 8, replica_id=t)
                acked.append((lsn, t, i))
        except LogServiceFailed as e:
            failures.append(e)
    ths = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    [t.start() for t in ths]; [t.join() for t in ths]
    assert len(failures) == 4, failures           # the typed error, for every appender
    assert svc.stats()["prealloc_errors"] >= 1
    for lsn, t, i in sorted(acked):
        print(lsn, t, i)
    svc.close()
""")


def test_file_size_limit_during_preallocation_loses_nothing(tmp_path, caplog):
    path = str(tmp_path / "log")
    limit = 200_000
    p = subprocess.run([sys.executable, "-c", FSIZE_CHILD, path, str(limit)], capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "log pre-allocation" in p.stderr and "File too large" in p.stderr
    acked = [tuple(map(int, line.split())) for line in p.stdout.split("\n") if line]
    assert len(acked) > 1000  # appends went on after the pre-allocation failed
    with caplog.at_level(logging.WARNING, logger="logtide.logservice"):
        with LogService.open(path) as svc:  # without the limit: every acknowledged record is there
            assert svc.get_latest_lsn() >= acked[-1][0]
            recs = {}
            lsn = 1
            while lsn <= svc.get_latest_lsn():
                got, lsn = svc.read(lsn, 1 << 20)
                recs.update((r.lsn, r.payload) for r in got)
            for lsn, t, i in acked:
                assert recs[lsn] == b"%d-%d" % (t, i) * 8
            assert svc.append(b"after") == svc.get_latest_lsn()
    (seg,) = segments(path)
    assert frames_end(seg) <= limit


def test_prefill_never_overwrites_frames_and_skips_a_replaced_segment(tmp_path):
    """CommitQueue.prefill directly: zeros go only past the frames; a fill meant for a segment the
    writer has left does nothing."""
    import threading
    from logtide._ext.commit_queue import CommitQueue
    q = CommitQueue(1)
    fl = QueueFlusher(q, tmp_path, 1)
    fd = fl.fd
    fd2 = os.open(tmp_path / "b.log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        q.mark = 0  # the group comes back unpublished: the fills below run while its appender waits
        gen = q.generation
        got = []
        t = threading.Thread(target=lambda: got.append(q.append_many(0, b"", [b"x" * 50, b"y" * 70])))
        t.start()
        first, last, starts, nbytes = fl.run(5.0)
        assert (first, last, nbytes) == (1, 2, 160) and q.zeroed == 160  # the group grew the file
        assert q.prefill(gen, 4096, True) == 4096 - 160
        assert q.prefill(gen, 1000, True) == 0  # already that long
        q.publish(last)
        t.join(10)
        assert got == [1]
        raw = os.pread(fd, 8192, 0)
        assert len(raw) == 4096 and raw[160:] == bytes(4096 - 160)
        assert wal.scan(raw, 0, 1)[3:] == (160, wal.OK)
        q.set_segment(fd2, 0)
        assert q.generation == gen + 1
        assert q.prefill(gen, 8192, True) == 0 and os.fstat(fd2).st_size == 0  # meant for the first file
        assert q.prefill(gen + 1, 100, False) == 100 and os.fstat(fd2).st_size == 100
    finally:
        q.close()
        fl.close()
        os.close(fd2)


@pytest.fixture
def fast_dir(tmp_path):
    """A directory on tmpfs when the machine has one: fsync and rename there are fast enough for a
    roll to meet the pre-allocation thread's work on every few segments."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="logtide-prealloc-", dir="/dev/shm")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_rolls_racing_the_next_segment_preparation_lose_nothing(fast_dir, fsync):
    """Segments of a few records roll while the pre-allocation thread prepares the next file: a
    roll that has taken the prepared file but not renamed it yet must not see it truncated and
    zeroed under it, nor be handed a file that is gone. Every record reads back after a reopen."""
    for round_ in range(8):
        path = os.path.join(fast_dir, f"r{round_}")
        want = [bytes([round_, i % 256]) * (300 + i % 100) for i in range(300)]
        with LogService.open(path, segment_size=2048, fsync=fsync) as svc:
            for body in want:
                svc.append(body)
        with LogService.open(path, segment_size=2048) as svc:
            assert payloads(svc) == want
