"""The truncation hold goes through HAKeeper: in a `logtide cluster` with two RO nodes, one is
SIGKILLed while the primary keeps writing. HAKeeper finds it down and drops it; its hold is
released (HAKeeper's truncation LSN moves past it, the primary lets it go too) and the WAL is
truncated past the LSN it held. Started again (`cluster start ro#1`), it registers with HAKeeper
again, subscribes as a new node and reads every tuple and page as the primary has them. The timeline is
measured and printed."""
from __future__ import annotations

import json
import time

import pytest
from cluster_run import logtide, until

from logtide.engine.cluster.layout import ClusterLayout
from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.rpc import connect
from logtide.errors import LogtideError
from logtide.replay import replication_pb2 as pb
from logtide.replay.replication_rpc import REPLAY_NODE
from logtide.replay.row_address import DB, SPC

pytestmark = pytest.mark.timeout(240)
RO_TIMEOUT = 2   # seconds without a heartbeat before HAKeeper calls an RO node down
REPLICA_TIMEOUT = 30   # the primary's own timeout: far beyond the test, so only HAKeeper's drop can release
REL = 16384






def _status(c) -> dict:
    return json.loads(c.invoke("Status", pb.Empty()).json)


def test_a_killed_ro_node_is_dropped_from_the_hold_and_rejoins(tmp_path):
    d = tmp_path / "cluster"
    logtide("cluster", "up", "--dir", d, "--ros", 2, "--cns", 0, "--spare-stores", 0, "--meta-replicas", 1,
            "--replica-timeout", REPLICA_TIMEOUT, "--logindex-segments", 2,   # the LogIndex saves: the WAL can go
            "--hakeeper-timeouts", f"log=15,tn=5,cn=5,primary=5,ro={RO_TIMEOUT},command=5")
    layout = ClusterLayout.load(str(d))
    primary, ro1, ro2 = layout.find("primary#1"), layout.find("ro#1"), layout.find("ro#2")
    hk = HAKeeperClient(",".join(layout.options["hakeeper_peers"].values()), timeout=3.0)
    pc = connect(REPLAY_NODE, primary.address, carrier="wire", timeout=20)
    rc = None
    written: dict[tuple, bytes] = {}

    def write(n: int) -> None:
        for _ in range(n):
            data = b"tuple %d" % len(written)
            t = pc.Insert(rel=REL, data=data)
            written[(t.block, t.slot)] = data

    try:
        until("HAKeeper hears both RO nodes and the primary",
               lambda: all(hk.status()["stores"].get(s, {}).get("heartbeated") for s in ("ro-1", "ro-2", "primary-1")),
               30)
        write(200)
        rc = connect(REPLAY_NODE, ro1.address, carrier="wire", timeout=20)
        (blk, slot), data = next(iter(written.items()))
        until("ro#1 reads a tuple", lambda: rc.Get(rel=REL, block=blk, slot=slot).found, 30)
        rc.close()
        rc = None

        def truncating() -> bool:
            write(20)
            return _status(pc)["truncated_lsn"] > 0
        until("the WAL is truncated while both RO nodes hold it", truncating, 30)
        held = hk.status()["stores"]["ro-1"]["min_used_lsn"]   # its hold as HAKeeper knows it
        logtide("cluster", "kill", "--dir", d, "ro#1")
        t0 = time.monotonic()
        timeline: dict[str, float] = {}
        end = t0 + 45
        while time.monotonic() < end and "wal truncated past the hold" not in timeline:
            write(20)                                      # the primary keeps writing
            now = time.monotonic() - t0
            try:
                st = hk.status()
            except LogtideError:
                continue
            ro = st["stores"].get("ro-1")
            if ro is not None:
                held = ro.get("min_used_lsn", held)
                # while HAKeeper holds for it, the truncation LSN stays below what it still needs
                assert st["truncation_lsn"] <= held - 1, (st["truncation_lsn"], held)
                if ro["down"]:
                    timeline.setdefault("down detected", now)
            else:
                timeline.setdefault("down detected", now)
                timeline.setdefault("dropped by HAKeeper", now)
                if st["truncation_lsn"] > held - 1:
                    timeline.setdefault("hold released", now)
                if _status(pc)["truncated_lsn"] > held - 1:
                    timeline.setdefault("wal truncated past the hold", now)
            time.sleep(0.1)
        assert "wal truncated past the hold" in timeline, (timeline, held, _status(pc))
        assert list(timeline) == ["down detected", "dropped by HAKeeper", "hold released",
                                  "wal truncated past the hold"], timeline
        # the primary let it go on HAKeeper's word, long before its own replica timeout
        assert "HAKeeper dropped ro-1" in (d / "logs" / "primary-1.log").read_text()
        assert timeline["wal truncated past the hold"] < REPLICA_TIMEOUT

        # ro#2 kept its hold all along and still reads everything
        logtide("cluster", "start", "--dir", d, "ro#1")
        t1 = time.monotonic()
        until("ro#1 registers and heartbeats again",
               lambda: (hk.status()["stores"].get("ro-1") or {}).get("heartbeated"), 30)
        timeline["rejoined"] = time.monotonic() - t0
        write(50)
        top = _status(pc)["write_lsn"]
        for node in (ro1, ro2):
            c = connect(REPLAY_NODE, node.address, carrier="wire", timeout=20)
            try:
                until(f"{node.name} applies the primary's WAL", lambda: _status(c)["applied_lsn"] >= top, 30)
                for (b, s), data in written.items():
                    got = c.Get(rel=REL, block=b, slot=s)
                    assert got.found and got.data == data, (node.name, b, s)
                for b in sorted({b for b, _s in written}):
                    tag = [SPC, DB, REL, 0, b]
                    mine, theirs = c.ReadPage(tag=tag).page, pc.ReadPage(tag=tag).page
                    # the same page but for its checksum (bytes 8-9), set when a page is written to storage
                    assert mine[:8] + mine[10:] == theirs[:8] + theirs[10:], (node.name, b)
            finally:
                c.close()
        timeline["reads correct pages"] = time.monotonic() - t0
        st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
        row = next(p for p in st["processes"] if p["role"] == "ro" and p["id"] == 1)
        assert row["state"] == "up" and row["pid"] != ro1.pid and row["status"]["ok"], row
        print("\nRO drop timeline after SIGKILL of ro#1 (HAKeeper RO timeout %d s, held LSN %d): %s; restarted "
              "%.1f s after the kill" % (RO_TIMEOUT, held, ", ".join(f"{k} {v:.1f} s" for k, v in timeline.items()),
                                         t1 - t0))
    finally:
        pc.close()
        if rc is not None:
            rc.close()
        hk.close()
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
