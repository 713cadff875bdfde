"""The simulator's disk model is the real disk's: DiskStorage killed by SIGKILL in the middle of
save(rd), again and again, reopens to one of the states that the simulator's torn write of rd
produces (engine/raft/sim/disk.py), and never to another. One kind of torn state is modeled here
and not yet drawn by the simulator: a crash inside the cut of a replaced tail keeps a prefix of the
old, uncommitted tail (DiskStorage removes the tail segment by segment; CI caught it once)."""
import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.sim.disk import ALL_STEPS, ENTRIES, SNAP_LOG, write_ready
from logtide.engine.raft.storage import MemoryStorage

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from raft_save_ops import VOTERS, readys  # noqa: E402
from child_output import rest_of_output  # noqa: E402

ROUNDS = 24


def _image(st) -> tuple:
    """What a restarted node would read: hard state, snapshot, and every entry after it."""
    hs, _conf = st.initial_state()
    snap = st.snapshot().meta
    first, last = st.first_index(), st.last_index()
    ents = tuple((e.index, e.term, e.data) for e in st.entries(first, last + 1)) if last >= first else ()
    return (hs.term, hs.vote, hs.commit), (snap.index, snap.term), first, ents


def _model_states(seed: int, inflight: int) -> tuple[set, MemoryStorage]:
    """Every state the simulator allows after a crash during save(rd_inflight)."""
    done = MemoryStorage.bootstrap(VOTERS)
    gen = readys(seed)
    for _ in range(inflight):
        rd = next(gen)
        if rd.must_sync:
            write_ready(done, rd)
    rd = next(gen)
    if not rd.must_sync:  # only the commit index moved: nothing is written
        return {_image(done)}, done
    states = set()
    for steps in range(ALL_STEPS + 1):
        for n in (range(len(rd.entries) + 1) if steps == ENTRIES and rd.entries else [None]):
            m = done.copy()
            write_ready(m, rd, steps, n)
            states.add(_image(m))
        if steps == ENTRIES and rd.entries:
            # inside the cut of a replaced tail: a prefix of the old (uncommitted) tail kept
            base = done.copy()
            write_ready(base, rd, SNAP_LOG)       # what precedes the entries (a snapshot's log)
            for cut in range(rd.entries[0].index, base.last_index() + 1):
                m = done.copy()
                write_ready(m, rd, steps, 0, torn_cut=cut)
                states.add(_image(m))
    return states, done


def _save_until_killed(d, seed: int, after: float) -> int:
    """Run the saver, SIGKILL it `after` seconds into its work; returns the Ready it was saving."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "raft_save_ops.py"), str(d), str(seed)],
                         stdout=subprocess.PIPE, text=True, cwd=d.parent)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "the saver did not start within 60 s"
        first = p.stdout.readline()
        time.sleep(after)
    finally:
        os.kill(p.pid, signal.SIGKILL)
    out = rest_of_output(p)
    lines = (first + out).split("\n")[:-1]    # the last line may be torn by the kill
    began = [int(x.split()[1]) for x in lines if x.startswith("B ")]
    assert began, "the saver made no progress before the kill"
    return began[-1]


def test_sigkill_mid_save_leaves_a_state_the_simulator_allows(tmp_path):
    rng = random.Random(22)
    mid_write = 0
    for rnd in range(ROUNDS):
        d = tmp_path / f"r{rnd}"
        seed = 2200 + rnd
        k = _save_until_killed(d, seed, rng.uniform(0.02, 0.4))
        allowed, done = _model_states(seed, k)
        st = DiskStorage.open(d, segment_size=4096)
        try:
            got = _image(st)
        finally:
            st.close()
        assert got in allowed, (f"round {rnd} (seed {seed}): after a kill during save of Ready {k}, DiskStorage "
                                f"reopened to a state the simulator's disk model does not produce: hard state "
                                f"{got[0]}, snapshot {got[1]}, first {got[2]}, last {got[3][-1][0] if got[3] else None}")
        mid_write += got != _image(done)
    # the kills really landed inside writes, not only between them
    assert mid_write >= ROUNDS // 4, mid_write


@pytest.mark.parametrize("seed", [3, 4])
def test_the_model_and_the_disk_agree_on_complete_saves(tmp_path, seed):
    """Without a crash, DiskStorage reopened and the model hold the same state after every Ready."""
    st = DiskStorage.open(tmp_path / "d", voters=VOTERS, segment_size=4096)
    model = MemoryStorage.bootstrap(VOTERS)
    gen = readys(seed)
    try:
        for k in range(300):
            rd = next(gen)
            st.save(rd)
            if rd.must_sync:
                write_ready(model, rd)
            if k % 50 == 49:
                st.close()
                st = DiskStorage.open(tmp_path / "d", segment_size=4096)
                assert _image(st) == _image(model), k
    finally:
        st.close()
