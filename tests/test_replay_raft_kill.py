"""Real processes: a `logtide replay primary --log` and an RO node (`replay ro --log`) on three
`logtide logservice serve --raft` replicas. 16 writers insert and update while the leader replica
is SIGKILLed: every acknowledged write is there, and the RO node serves the same pages as the
primary. Then the primary itself is SIGKILLed mid-load and restarted on the replicated log: it
recovers every acknowledged write, no unacknowledged write is half-visible, and the RO node
re-attaches. The primary is SIGKILLed again and the RO node promoted: it has every write and
writes to the same log. With the whole group down, a write fails with a typed error within the
deadline."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_logservice_raft_kill import Cluster  # noqa: E402 - the raft tests' process cluster, reused

from logtide.engine.logservice import connect_logservice  # noqa: E402
from logtide.engine.logservice.replicated_client import NoLeaderError  # noqa: E402
from logtide.errors import LogtideError  # noqa: E402

from replay_procs import kill as _kill, replay_client as _client, start_replay as _start  # noqa: E402

REL = 16384
WRITERS = 16
LOG_DEADLINE = "8"   # no leader this long: a typed error (failover takes 1-2 s, more on a loaded machine)


def _stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            _kill(p)


def _pages(c, nblocks):
    """{block: live items} of blocks 0.. up to the last block ever used, at least `nblocks`: an
    unacknowledged write may have gone to a new block past every acknowledged row."""
    from logtide._ext import page as pg
    from logtide.replay.row_address import rel_tag
    out, b = {}, 0
    while True:
        page = c.ReadPage(tag=list(rel_tag(REL, b))).page
        if b >= nblocks and pg.nslots(page) == 0:
            return out
        out[b] = pg.items(page)
        b += 1


class Load:
    """16 writers: inserts, and updates of their own rows. Each write's outcome is recorded:
    acknowledged (the tid), or unknown (it failed: it may or may not have taken effect)."""

    def __init__(self, addr):
        self.addr = addr
        self.lock = threading.Lock()
        self.rows = {}        # tid -> data, acknowledged
        self.unknown = []     # (kind, old tid or None, data) whose call failed
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,)) for w in range(WRITERS)]
        self.errors = []

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _run(self, w):
        c = _client(self.addr)
        mine, i = [], 0
        try:
            while not self.stop.is_set():
                i += 1
                data = b"w%02d-%06d " % (w, i) * 3
                old = mine[i % len(mine)] if mine and i % 4 == 0 else None
                try:
                    if old is None:
                        r = c.Insert(rel=REL, data=data)
                    else:
                        r = c.Update(rel=REL, block=old[0], slot=old[1], data=data)
                except Exception as exc:  # noqa: BLE001 - the outcome of this write is unknown
                    with self.lock:
                        self.unknown.append(("update" if old else "insert", old, data))
                        self.errors.append(exc)
                    return
                tid = (r.block, r.slot)
                with self.lock:
                    if old is not None:
                        del self.rows[old]
                        mine.remove(old)
                    self.rows[tid] = data
                mine.append(tid)
        finally:
            c.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _check(c, load, nblocks):
    """Every acknowledged row at its tid; any other live tuple is a whole unacknowledged write; an
    unacknowledged update is all or nothing (its old row is dead iff its new row exists)."""
    pages = _pages(c, nblocks)
    live = {(b, s): d for b, items in pages.items() for s, d in items.items()}
    moving = {old: d for kind, old, d in load.unknown if kind == "update"}
    for tid, data in load.rows.items():
        if tid not in moving:
            assert live.get(tid) == data, f"acknowledged row {tid} lost or changed"
    extra = {tid: d for tid, d in live.items() if tid not in load.rows}
    pending = {d for _, _, d in load.unknown}
    for tid, d in extra.items():
        assert d in pending, f"tuple {tid} = {d[:20]!r} was never written"
    assert len(set(extra.values())) == len(extra), "an unacknowledged write is there twice"
    for old, d in moving.items():
        new_there = d in extra.values()
        old_there = live.get(old) == load.rows[old]
        assert new_there != old_there, (
            f"the update of {old} is half-visible (old {old_there}, new {new_there}): at {old} now "
            f"{live.get(old, b'nothing')[:24]!r}, its new data {d[:24]!r} at "
            f"{[t for t, v in live.items() if v == d]}; {len(load.unknown)} writes of unknown outcome")
    return pages


def _status(c):
    return json.loads(c.Status().json)


def _wait(pred, what, timeout=60):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_primary_and_ro_node_survive_the_leader_replica_and_a_primary_kill(tmp_path):
    cluster = Cluster(tmp_path)
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    d = str(tmp_path / "shared")
    pargs = ("primary", "--dir", d, "--log", addrs, "--log-deadline", LOG_DEADLINE, "--checkpoint-interval", "0.2",
             "--pool-pages", "64")
    rargs = ("--dir", d, "--log", addrs, "--log-deadline", LOG_DEADLINE, "--node-id", "1")
    procs = []
    try:
        cluster.leader()
        prim, paddr = _start(tmp_path, *pargs, name="primary")
        ro, raddr = _start(tmp_path, "ro", "--primary", paddr, *rargs, name="ro1")
        procs += [prim, ro]
        pc, rc = _client(paddr), _client(raddr)

        # 1. the leader replica dies mid-load: no write fails, every acknowledged one is there
        load = Load(paddr).start()
        time.sleep(1.5)
        lead = cluster.leader()
        cluster.kill(lead)
        time.sleep(1.5)
        cluster.start(lead)
        time.sleep(0.5)
        load.finish()
        assert not load.errors, f"writes failed across the failover: {load.errors[:3]}"
        assert len(load.rows) > 100
        st = _status(pc)
        log = connect_logservice(addrs)
        log.get_truncated_lsn()   # a ReadIndex read first: readers() is answered by one replica, unsynced
        assert "ro-1" in log.readers()   # the RO node's truncation hold, on the replicated log
        log.close()
        _wait(lambda: _status(rc).get("applied_lsn", 0) >= st["write_lsn"], "the RO node to catch up")
        nb = max(b for b, _ in load.rows) + 1
        assert _check(pc, load, nb) == _check(rc, load, nb)   # the RO node serves the primary's pages

        # 2. the primary is SIGKILLed mid-load and restarts on the replicated log
        load2 = Load(paddr)
        load2.rows = dict(load.rows)
        load2.start()
        time.sleep(1.0)
        _kill(prim)
        load2.finish()
        pc.close()
        prim, paddr2 = _start(tmp_path, *pargs, "--listen", paddr, name="primary")
        procs.append(prim)
        pc = _client(paddr)
        st2 = _status(pc)
        assert st2["write_lsn"] >= st["write_lsn"]
        nb = max([b for b, _ in load2.rows] + [nb - 1]) + 1
        pages = _check(pc, load2, nb)
        _wait(lambda: _status(rc).get("applied_lsn", 0) >= st2["write_lsn"], "the RO node to re-attach")
        assert _check(rc, load2, nb) == pages
        r = pc.Insert(rel=REL, data=b"after the restart")
        load2.rows[(r.block, r.slot)] = b"after the restart"
        _wait(lambda: rc.Get(rel=REL, block=r.block, slot=r.slot).data == b"after the restart", "the RO node")

        # 3. the primary dies again and the RO node is promoted: it writes to the same replicated log
        _kill(prim)
        pc.close()
        rc.Promote()
        assert _status(rc)["role"] == "primary"
        _check(rc, load2, nb)
        r = rc.Insert(rel=REL, data=b"after the promotion")
        assert rc.Get(rel=REL, block=r.block, slot=r.slot).data == b"after the promotion"

        # 4. the whole group down: a write fails with a typed error within the deadline, no hang
        for i in list(cluster.procs):
            cluster.kill(i)
        t0 = time.monotonic()
        with pytest.raises(NoLeaderError):
            rc.Insert(rel=REL, data=b"no log")
        assert time.monotonic() - t0 < 2 * float(LOG_DEADLINE) + 5
        # the server stays up; the primary stopped writing (its pages may hold what the log does not)
        assert _status(rc)["role"] == "primary"
        with pytest.raises(LogtideError, match="closed"):
            rc.Insert(rel=REL, data=b"still no log")
        rc.close()
    finally:
        for p in procs:
            _kill(p)
        cluster.stop()


@pytest.mark.timeout(240)
def test_primary_rides_out_frozen_replicas(tmp_path):
    """The leader replica SIGSTOPped under 16 writers: no write fails, the RO node keeps up; thawed,
    it rejoins and every replica holds the same log. The whole group frozen: a write ends in
    NoLeaderError within the deadline; thawed, a restarted primary has every acknowledged write."""
    from frozen import freeze, thaw
    from replica_logs import replica_logs
    cluster = Cluster(tmp_path)
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    d = str(tmp_path / "shared")
    pargs = ("primary", "--dir", d, "--log", addrs, "--log-deadline", LOG_DEADLINE, "--checkpoint-interval", "0.2",
             "--pool-pages", "64")
    procs, frozen = [], []
    try:
        cluster.leader()
        prim, paddr = _start(tmp_path, *pargs, name="primary")
        ro, raddr = _start(tmp_path, "ro", "--primary", paddr, "--dir", d, "--log", addrs, "--log-deadline",
                           LOG_DEADLINE, "--node-id", "1", name="ro1")
        procs += [prim, ro]
        pc, rc = _client(paddr), _client(raddr)

        load = Load(paddr).start()
        time.sleep(1.5)
        lead = cluster.leader()
        freeze(cluster.procs[lead].pid)
        frozen.append(lead)
        assert cluster.leader() != lead
        n = len(load.rows)
        time.sleep(2.0)
        assert len(load.rows) > n, "no write went through while the old leader was frozen"
        thaw(cluster.procs[lead].pid)
        frozen.remove(lead)
        time.sleep(0.5)
        load.finish()
        assert not load.errors, f"writes failed while the leader replica was frozen: {load.errors[:3]}"
        st = _status(pc)
        _wait(lambda: _status(rc).get("applied_lsn", 0) >= st["write_lsn"], "the RO node to catch up")
        nb = max(b for b, _ in load.rows) + 1
        assert _check(pc, load, nb) == _check(rc, load, nb)
        logs = replica_logs(cluster)
        assert logs[1] == logs[2] == logs[3], "a thawed replica disagrees about the log"

        for i in list(cluster.procs):
            freeze(cluster.procs[i].pid)
            frozen.append(i)
        t0 = time.monotonic()
        with pytest.raises(NoLeaderError):
            pc.Insert(rel=REL, data=b"no log")
        assert time.monotonic() - t0 < 2 * float(LOG_DEADLINE) + 5
        load.unknown.append(("insert", None, b"no log"))   # queued at a frozen leader, it may commit on thaw
        for i in list(frozen):
            thaw(cluster.procs[i].pid)
            frozen.remove(i)
        cluster.leader()
        # the primary stopped writing when its log write failed; restarted, it has every acknowledged write
        _kill(prim)
        pc.close()
        prim, _ = _start(tmp_path, *pargs, "--listen", paddr, name="primary")
        procs.append(prim)
        pc = _client(paddr)
        _check(pc, load, nb)
        r = pc.Insert(rel=REL, data=b"group thawed")
        assert pc.Get(rel=REL, block=r.block, slot=r.slot).data == b"group thawed"
        logs = replica_logs(cluster)
        assert logs[1] == logs[2] == logs[3]
        pc.close()
        rc.close()
    finally:
        for i in frozen:
            thaw(cluster.procs[i].pid)
        for p in procs:
            _kill(p)
        cluster.stop()
