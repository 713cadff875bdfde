"""A LogIndex writer SIGKILLed at random points (mostly inside flushes) loses nothing and duplicates nothing."""
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from logtide import LogIndex

WRITER = r"""
import sys
import numpy as np
from logtide import LogIndex

def stream(n, seed=5):
    # a WAL-meta stream: records of 1-3 pages, several records per LSN step
    rng = np.random.default_rng(seed)
    per = rng.integers(1, 4, n)
    lsns = np.repeat(np.arange(1, n + 1, dtype=np.uint64) * 8, per)
    tags = np.zeros((len(lsns), 5), np.uint32)
    tags[:, 0], tags[:, 1] = 1663, 5
    tags[:, 2] = 16384 + rng.integers(0, 4, len(lsns))
    tags[:, 4] = rng.integers(0, 300, len(lsns))
    return tags, lsns

if __name__ == "__main__":
    d, n, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tags, lsns = stream(n)
    li = LogIndex.open(d, max_segments=6, ring_size=2)
    start = li.replay_needed_from()
    i = int(np.searchsorted(lsns, start, "left"))
    print("READY", start, flush=True)
    while i < len(lsns):
        li.insert_many(tags[i:i + chunk], lsns[i:i + chunk])
        li.flush()
        i += chunk
    li.close()
    print("DONE", flush=True)
"""

N_RECORDS = 60_000
KILLS = 22
MAX_KILLS = 90      # a slow run keeps killing until enough kills have landed inside a flush
TORN_WANTED = 3


def _stream(tmp_path):
    ns = {}
    exec(compile(WRITER.split('if __name__')[0], "writer", "exec"), ns)
    return ns["stream"](N_RECORDS)


def _expected(tags, lsns):
    """(lsn, tag) pairs, each once (a record names a page once)."""
    return sorted({(int(l), tuple(t)) for l, t in zip(lsns.tolist(), tags.tolist())})


def _verify_saved(path, want, since):
    """Everything saved below the replay point (from since on) is found exactly once, in order, by an RO reader."""
    ro = LogIndex.open(path, mode="ro")
    start = ro.replay_needed_from()
    walked = [(l, tuple(t)) for l, t in ro.iter_lsn(since) if l < start]
    ref = [x for x in want if since <= x[0] < start]
    assert [l for l, _ in walked] == sorted(l for l, _ in walked)
    walked.sort()   # within one LSN the walk keeps insertion order
    assert walked == ref, f"{len(walked)} walked vs {len(ref)} expected below {start}"
    ro.close()
    return start


def _torn_flush(path) -> bool:
    """Did the kill land inside a flush: a temp meta file, or table/bloom bytes past the committed tables?"""
    from logtide.logindex.meta_file import read_meta
    from logtide.logindex.table_format import (BLOOM_BLOCK, META_NAME, SLOT_SIZE, TABLES_PER_FILE,
                                               bloom_file_name, table_file_name)
    if (path / (META_NAME + ".tmp")).exists():
        return True
    meta = read_meta(path)
    committed = (path / META_NAME).stat().st_mtime_ns if meta else 0
    nxt = meta.max_table_id + 1 if meta else 0
    seg, slot = divmod(nxt, TABLES_PER_FILE)
    for name, unit in ((table_file_name(seg), SLOT_SIZE), (bloom_file_name(seg), BLOOM_BLOCK)):
        f = path / name
        # written past the committed tables, not before the last commit (file times are coarse:
        # a table written in the same clock tick as the last commit has an equal time)
        if f.exists() and f.stat().st_size > slot * unit and f.stat().st_mtime_ns >= committed:
            return True
    return False


@pytest.mark.timeout(240)
def test_sigkill_during_flushes_loses_nothing(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    d = tmp_path / "li"
    tags, lsns = _stream(tmp_path)
    want = _expected(tags, lsns)
    rnd = random.Random(1121)
    kills, starts, torn = 0, [], 0
    while kills < KILLS or (torn < TORN_WANTED and kills < MAX_KILLS):
        p = subprocess.Popen([sys.executable, str(script), str(d), str(N_RECORDS), "40"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("READY"), line + p.stderr.read()
        time.sleep(rnd.uniform(0.01, 0.25))
        if p.poll() is not None:
            out = p.stdout.read()
            assert "DONE" in out, p.stderr.read()
            break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        torn += _torn_flush(d)
        starts.append(_verify_saved(d, want, max(0, max(starts[-1:] or [0]) - 64)))
    print("replay points after each kill:", starts, "kills inside a flush:", torn)
    assert torn >= TORN_WANTED, f"only {torn} of {kills} kills landed inside a flush"
    assert kills >= 20, f"only {kills} kills before the writer finished: make the stream longer"
    assert starts == sorted(starts) and starts[-1] > starts[0]
    # reopen once more and re-insert from replay_needed_from(), past where the writer got
    li = LogIndex.open(d, max_segments=6, ring_size=2)
    start = li.replay_needed_from()
    bound = start + 8 * 500
    redo = np.flatnonzero((lsns >= start) & (lsns <= bound))
    li.insert_many(tags[redo], lsns[redo])
    li.flush(include_active=True)
    li.close()
    ref = [x for x in want if x[0] <= bound]
    for mode in ("primary", "ro"):
        li = LogIndex.open(d, mode=mode, max_segments=6, ring_size=2)
        walked = [(l, tuple(t)) for l, t in li.iter_lsn()]
        assert [l for l, _ in walked] == sorted(l for l, _ in walked)
        assert sorted(walked) == ref, "every (LSN, page) exactly once"
        sel = lsns <= bound
        uniq = np.unique(tags[sel], axis=0)
        offsets, found = li.lsns_many(uniq)
        per_tag = {}
        for l, t in ref:
            per_tag.setdefault(t, []).append(l)
        for i, t in enumerate(map(tuple, uniq.tolist())):
            assert found[offsets[i]:offsets[i + 1]].tolist() == per_tag[t]
        li.close()
