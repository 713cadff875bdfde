"""DiskStorage: the Raft log on the log service's segment files, hard state + membership in one
atomic state file. Recovery, tail replacement, snapshots, corruption, kill -9, and a Raft group
running on it."""
import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

from logtide._ext import wal
from logtide.engine.raft import ADD_LEARNER, ConfChange, ConfState, Entry, HardState, MemoryStorage
from logtide.engine.raft import messages as M
from logtide.engine.nodehost.disk_storage import DiskStorage
from logtide.engine.raft.errors import CorruptRaftEntry
from logtide.engine.raft.raft_format import LOG_DIR, STATE_FILE
from logtide.errors import CorruptionError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from raft_harness import Net  # noqa: E402
from raft_storage_ops import apply, ops  # noqa: E402
from child_output import rest_of_output  # noqa: E402


def log_of(st, lo=None):
    lo = st.first_index() if lo is None else lo
    return [(e.index, e.term, e.type, e.data) for e in st.entries(lo, st.last_index() + 1)] if st.last_index() >= lo else []


def test_differential_against_memory_storage_with_reopens(tmp_path):
    disk = DiskStorage.open(tmp_path, voters=[1, 2, 3], segment_size=2048)
    mem = MemoryStorage.bootstrap([1, 2, 3])
    for k, op in enumerate(ops(11)):
        apply(disk, op)
        apply(mem, op)
        if k % 40 == 39:
            disk.close()
            disk = DiskStorage.open(tmp_path, segment_size=2048)
        assert (disk.first_index(), disk.last_index()) == (mem.first_index(), mem.last_index())
        if k == 400:
            break
    assert log_of(disk) == log_of(mem)
    assert disk.initial_state()[0] == mem.hard_state
    assert disk.snapshot().data == mem.snapshot().data and disk.snapshot().meta.index == mem.snapshot().meta.index
    assert disk.term(disk.snapshot().meta.index) == mem.term(mem.snapshot().meta.index)
    # compaction removed whole segments below the snapshot
    segs = sorted(os.listdir(tmp_path / LOG_DIR))
    assert int(segs[0][:20]) <= disk.first_index() and len(segs) < 200
    disk.close()


def test_membership_comes_back_from_the_state_file_and_the_log(tmp_path):
    st = DiskStorage.open(tmp_path, voters=[1, 2, 3])
    st.append([Entry(2, 4, M.ENTRY_CONF, ConfChange(ADD_LEARNER, 4).encode()), Entry(2, 5, 0, b"x")])
    st.create_snapshot(3, ConfState([1, 2, 3]), b"img")
    st.compact(3)
    st.close()
    st = DiskStorage.open(tmp_path)
    hs, conf = st.initial_state()
    assert conf == ConfState([1, 2, 3]) and [e.index for e in st.conf_entries()] == [4]
    from logtide.engine.raft import Config, RawNode
    node = RawNode(Config(1), st, applied=3)
    assert node.raft.conf == ConfState([1, 2, 3], [4])
    st.close()


def test_snapshot_from_the_leader_replaces_a_diverging_log(tmp_path):
    from logtide.engine.raft.messages import Snapshot, SnapshotMeta
    st = DiskStorage.open(tmp_path, voters=[1, 2, 3])
    st.append([Entry(2, i, 0, b"old") for i in range(4, 30)])
    st.apply_snapshot(Snapshot(SnapshotMeta(50, 5, ConfState([1, 2, 3])), b"leader-image"), HardState(5, 0, 50))
    assert (st.first_index(), st.last_index()) == (51, 50)
    st.append([Entry(5, 51, 0, b"new")])
    st.close()
    st = DiskStorage.open(tmp_path)
    assert (st.first_index(), st.last_index(), st.snapshot().data) == (51, 51, b"leader-image")
    assert log_of(st) == [(51, 5, 0, b"new")] and st.initial_state()[0] == HardState(5, 0, 50)
    st.close()


def test_torn_tail_is_cut_and_middle_corruption_is_refused(tmp_path):
    st = DiskStorage.open(tmp_path, voters=[1])
    st.append([Entry(1, i, 0, b"payload-%d" % i) for i in range(2, 40)])
    st.close()
    seg = os.path.join(tmp_path, LOG_DIR, sorted(os.listdir(tmp_path / LOG_DIR))[-1])
    with open(seg, "rb") as f:  # where the frames end: pre-allocated zeros follow them
        size = wal.scan(f.read(), 0, int(os.path.basename(seg)[:20]))[3]
    with open(seg, "r+b") as f:
        f.truncate(size - 5)  # a torn last frame
    st = DiskStorage.open(tmp_path)
    assert st.last_index() == 38 and log_of(st)[-1][3] == b"payload-38"
    st.close()
    with open(seg, "r+b") as f:  # flip a byte in a middle frame
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CorruptionError):
        DiskStorage.open(tmp_path)
    # a damaged state file is refused too, with a typed error
    with open(os.path.join(tmp_path, STATE_FILE), "r+b") as f:
        f.seek(12)
        f.write(b"#")
    with pytest.raises(CorruptRaftEntry):
        DiskStorage.open(tmp_path)


def _check_recovered(dirpath, seed, acked):
    """The reopened disk equals the model after `acked` ops, except what op acked+1 (in flight
    when the process died) may have left."""
    mem = MemoryStorage.bootstrap([1, 2, 3])
    gen = ops(seed)
    for _ in range(acked):
        apply(mem, next(gen))
    inflight = next(gen)
    after = MemoryStorage.bootstrap([1, 2, 3])
    gen = ops(seed)
    for _ in range(acked + 1):
        apply(after, next(gen))
    st = DiskStorage.open(dirpath, segment_size=4096)
    try:
        hs = st.initial_state()[0]
        assert hs in (mem.hard_state, after.hard_state)
        assert st.snapshot().meta.index in (mem.snapshot().meta.index, after.snapshot().meta.index)
        keep_to = inflight[1][0].index - 1 if inflight[0] == "append" else mem.last_index()
        lo = max(st.first_index(), mem.first_index())
        assert st.last_index() >= min(keep_to, mem.last_index())
        for i in range(lo, min(keep_to, mem.last_index()) + 1):
            e = st.entries(i, i + 1)[0]
            m = mem.entries(i, i + 1)[0]
            assert (e.term, e.data) == (m.term, m.data), f"acknowledged entry {i} changed after kill -9"
        if inflight[0] == "append":
            for i in range(keep_to + 1, st.last_index() + 1):
                e = st.entries(i, i + 1)[0]
                cands = [m.entries(i, i + 1)[0] for m in (mem, after) if m.first_index() <= i <= m.last_index()]
                assert (e.term, e.data) in [(x.term, x.data) for x in cands]
    finally:
        st.close()


def test_kill_9_loses_nothing_acknowledged(tmp_path):
    rng = random.Random(5)
    script = os.path.join(HERE, "raft_storage_ops.py")
    for rnd in range(12):
        d = tmp_path / f"r{rnd}"
        seed = 100 + rnd
        p = subprocess.Popen([sys.executable, script, str(d), str(seed)], stdout=subprocess.PIPE, text=True,
                             cwd=tmp_path)
        ready, _, _ = select.select([p.stdout], [], [], 60)  # wait for the first durable write
        assert ready, "the writer did not start within 60 s"
        first = p.stdout.readline()
        time.sleep(rng.uniform(0.05, 0.5))
        os.kill(p.pid, signal.SIGKILL)
        out = rest_of_output(p)
        lines = (first + out).split()
        acked = int(lines[-1]) if lines else 0
        assert acked > 0, "the writer made no progress before the kill"
        _check_recovered(d, seed, acked)


def test_a_raft_group_on_disk_survives_restarts(tmp_path):
    net = Net([1, 2, 3], storage=lambda i, ids: DiskStorage.open(tmp_path / f"n{i}", voters=ids, segment_size=4096))
    lead = net.elect()
    for k in range(50):
        net.nodes[lead].propose(b"v%d" % k)
        if k % 10 == 0:
            net.settle()
    net.settle()
    # every node restarts from its directory alone
    for i in list(net.nodes):
        net.stores[i].close()
        net.add(i, DiskStorage.open(tmp_path / f"n{i}", segment_size=4096))
    lead = net.elect()
    net.nodes[lead].propose(b"after-restart")
    net.settle()
    for i in net.nodes:
        st = net.stores[i]
        data = [e.data for e in st.entries(1, st.last_index() + 1) if e.type == 0 and e.data]
        assert data == [b"v%d" % k for k in range(50)] + [b"after-restart"]
    # a follower behind the compaction point catches up through a snapshot on disk
    lag = next(i for i in net.nodes if i != lead)
    net.isolate(lag)
    for k in range(30):
        net.nodes[lead].propose(b"w%d" % k)
    net.settle()
    for i in net.nodes:
        if i != lag:
            st, applied = net.stores[i], net.nodes[i].raft.log.applied
            st.create_snapshot(applied, net.nodes[i].conf_at(applied), b"image@%d" % applied)
            st.compact(applied)
            net.nodes[i].compacted()
    net.heal()
    net.tick(3)
    assert net.stores[lag].snapshot().data == net.stores[lead].snapshot().data
    net.nodes[lead].propose(b"tail")
    net.settle()
    assert net.stores[lag].entries(net.stores[lag].last_index(), net.stores[lag].last_index() + 1)[0].data == b"tail"
    for st in net.stores.values():
        st.close()
