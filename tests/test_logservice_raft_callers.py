"""Callers of the log service run unchanged against the replicated one: a TN commits, flushes and
checkpoints (truncate, reader reports) on `connect_logservice("h1:p1,h2:p2,h3:p3")`; after its
leader replica is gone, a new TN rebuilt from the replicated log and the objects has every commit."""
import time

import pytest

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice.replicated import ReplicatedLogService
from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.objectstore import ObjectStore

from ports import free_ports


@pytest.mark.timeout(120)
def test_tn_on_a_replicated_log_survives_losing_the_leader(tmp_path):
    peers = {i: f"127.0.0.1:{p}" for i, p in zip((1, 2, 3), free_ports(3))}
    reps = {i: ReplicatedLogService.open(tmp_path / f"r{i}", i, peers, peers[i], tick_interval=0.05) for i in peers}
    addrs = ",".join(peers.values())
    try:
        tn = TransactionNode(connect_logservice(addrs), ObjectStore(tmp_path / "objects"))
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        for i in range(60):
            x = tn.begin()
            x.insert("t", {"id": [i], "v": [i * 7]})
            if i % 5 == 4:
                x.delete("t", [i - 2])
            x.commit()
            if i == 25:
                tn.flush()
            if i == 40:
                tn.checkpoint_now()
        assert tn.log.get_truncated_lsn() > 0
        tn.close()
        tn.log.close()
        lead = next(i for i, r in reps.items() if r.node.is_leader())
        reps.pop(lead).close()
        tn = TransactionNode(connect_logservice(addrs), ObjectStore(tmp_path / "objects"))
        exp = {}
        for i in range(60):
            exp[i] = i * 7
            if i % 5 == 4:
                exp.pop(i - 2, None)
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        got = {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
        assert got == exp
        cn.close()
        tn.close()
        tn.log.close()
    finally:
        for r in reps.values():
            r.close()


def _group(tmp_path):
    peers = {i: f"127.0.0.1:{p}" for i, p in zip((1, 2, 3), free_ports(3))}
    reps = {i: ReplicatedLogService.open(tmp_path / f"r{i}", i, peers, peers[i], tick_interval=0.05) for i in peers}
    return reps, ",".join(peers.values())


@pytest.mark.timeout(120)
def test_primary_and_ro_node_on_a_replicated_log(tmp_path):
    """The primary writes its WAL as frames on the replicated log (dense WAL LSNs over Raft
    indexes), an RO node reads them from the group, checkpoints truncate the log while the RO
    node's registered reader holds it, and a primary reopened after the leader replica is gone
    recovers every acknowledged write."""
    from logtide._ext import page as pg
    from logtide.replay.primary import Primary
    from logtide.replay.ro_node import ReadOnlyNode
    from logtide.replay.row_address import rel_tag
    from logtide.replay.transport_inproc import connect_inprocess
    rel = 16384
    reps, addrs = _group(tmp_path)
    d = tmp_path / "shared"
    try:
        log = connect_logservice(addrs)
        # 2-segment LogIndex memtables save table files after a few records, so truncation starts early
        primary = Primary(d, log=log, pool_pages=32, checkpoint_interval=0.05, logindex_segments=2)
        ro_log = connect_logservice(addrs)
        ro = ReadOnlyNode(d, ro_log, node_id=1, feedback_interval=0.05, logindex_segments=2)
        link = connect_inprocess(primary, ro)
        acked = {}
        for i in range(150):
            if i % 10 == 9:
                datas = [b"batch %d.%d" % (i, k) * 4 for k in range(5)]
                acked.update(zip(primary.insert_many(rel, datas), datas))
            elif i % 7 == 3:
                tid = sorted(acked)[i % len(acked)]
                data = b"updated %d" % i
                acked[primary.update(rel, tid, data)] = data
                del acked[tid]
            else:
                acked[primary.insert(rel, b"row %d" % i * 3)] = b"row %d" % i * 3
        assert ro.wait_applied(primary.write_lsn)
        end = time.monotonic() + 30
        while primary.truncated_lsn == 0 and time.monotonic() < end:
            primary.checkpoint()
            time.sleep(0.05)
        assert primary.truncated_lsn > 0 and log.get_truncated_lsn() > 0
        assert "ro-1" in log.readers()
        for b in range(primary.nblocks(rel)):
            assert pg.items(ro.read_page(rel_tag(rel, b))[0]) == pg.items(primary.read_page(rel_tag(rel, b))[0])
        lead = next(i for i, r in reps.items() if r.node.is_leader())
        reps.pop(lead).close()
        for i in range(20):   # the group elects a new leader; writes go on
            acked[primary.insert(rel, b"after %d" % i)] = b"after %d" % i
        assert ro.wait_applied(primary.write_lsn)
        assert ro.get(rel, max(acked)) == acked[max(acked)]
        for i in range(3):  # rows just before the crash
            acked[primary.insert(rel, b"last %d" % i)] = b"last %d" % i
        write_lsn = primary.write_lsn
        old = primary
        old.crash()   # no flush: the reopened primary redoes the log after the last checkpoint
        # (crash() joined the checkpoint thread: its last consistent LSN is the control file's)
        primary = Primary(d, log=log, pool_pages=32, checkpoint_interval=0, logindex_segments=2)
        assert primary.write_lsn == write_lsn
        assert primary.recovered_records == write_lsn - old.consistent_lsn
        assert {t: primary.get(rel, t) for t in acked} == acked
        # the RO node's hold was adopted from the log's readers, translated to WAL LSNs (never looser)
        held = primary.replicas[1]
        assert held.held and 0 < held.min_used_lsn <= ro.min_used_lsn()
        primary.close()
        link.close()
        ro.close()
        log.close()
        ro_log.close()
    finally:
        for r in reps.values():
            r.close()


@pytest.mark.timeout(120)
def test_callers_on_an_unreachable_group_exit_with_a_typed_error(tmp_path):
    """`replay primary|ro --log` with no replica up: one line naming
    NoLeaderError after the log deadline, exit status 2, no hang."""
    import subprocess
    import sys
    addrs = ",".join(f"127.0.0.1:{p}" for p in free_ports(3))
    cmds = [["replay", "primary", "--dir", str(tmp_path / "p"), "--log", addrs, "--log-deadline", "1"],
            ["replay", "ro", "--dir", str(tmp_path / "p"), "--primary", "127.0.0.1:1", "--log", addrs,
             "--log-deadline", "1"]]
    for cmd in cmds:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "logtide", *cmd], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "NoLeaderError" in r.stderr and "Traceback" not in r.stdout + r.stderr, (cmd, r.stdout, r.stderr)
        assert time.monotonic() - t0 < 30


def test_connect_logservice_replicated_flag_on_one_address():
    """replicated=True picks the Raft client even for one address (the flag is not passed on)."""
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    client = connect_logservice("127.0.0.1:1", replicated=True)
    try:
        assert isinstance(client, ReplicatedLogServiceClient) and client.addresses == ["127.0.0.1:1"]
    finally:
        client.close()
