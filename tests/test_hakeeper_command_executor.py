"""A log store's membership change that cannot commit does not stop its heartbeats.

Three HAKeeper processes and three log-store processes on loopback (Raft election after 4 s, so a
leader that loses its followers keeps leading, and its membership change waits, for seconds).
Both followers are SIGSTOPped, and HAKeeper is given a REMOVE_REPLICA for the shard leader's
store: the change cannot commit. The store runs it on its command executor, so its heartbeats go
on meanwhile: HAKeeper (log-store timeout 3 s) never calls it down, and no gap between two of its
applied heartbeats exceeds 2 s, while the change waits for seconds and then fails, typed.
"""
from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest
from cluster_run import until
from hakeeper_procs import LOGTIDE, HAKeeperProcs
from ports import free_ports

from logtide.engine.hakeeper.schedule_command import CommandType as C
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from frozen import freeze

pytestmark = pytest.mark.timeout(120)
MAX_GAP_TICKS = 20   # 2 s at 10 ticks a second: a heartbeat a second, with room for a slow proposal


def test_a_blocked_membership_change_does_not_delay_heartbeats(tmp_path):
    hks = HAKeeperProcs(tmp_path)
    ports = dict(zip((1, 2, 3), free_ports(3)))
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in ports.items())
    stores = {}
    try:
        hks.leader()
        for i, p in ports.items():
            stores[i] = subprocess.Popen(
                [LOGTIDE, "logservice", "serve", "--raft", "--id", str(i), "--peers", peers, "--listen",
                 f"127.0.0.1:{p}", "--dir", str(tmp_path / f"store{i}"), "--tick", "0.1", "--election-tick", "40",
                 "--hakeeper", hks.addrs()], stdout=open(tmp_path / f"store{i}.log", "wb"),
                stderr=subprocess.STDOUT)
        hk = hks.client(timeout=3.0)
        sh = until("HAKeeper knows the shard's voters and leader",
                   lambda: (lambda s: s if set(s.get("voters", {})) == {"1", "2", "3"} and s.get("leader") else None)(
                       hk.status()["shards"].get("1", {})), 40)
        lead = sh["leader"]
        followers = [i for i in (1, 2, 3) if i != lead]
        for i in followers:
            freeze(stores[i].pid)
        t0 = time.monotonic()
        assert hk.schedule([ScheduleCommand(C.REMOVE_REPLICA, f"log-{lead}", 1, followers[0],
                                            f"log-{followers[0]}")], 100) == 1
        log_path = tmp_path / f"store{lead}.log"
        pattern = re.compile(r"schedule command REMOVE_REPLICA shard 1 replica %d\S* -> log-%d failed after "
                             r"([0-9.]+) s" % (followers[0], lead))
        worst, last_hb, failed = 0, None, None
        while time.monotonic() - t0 < 12:
            st = hk.status()
            me = st["stores"][f"log-{lead}"]
            assert not me["down"], (st["tick"], me)
            worst = max(worst, st["tick"] - me["last_heartbeat_tick"])
            if last_hb is not None and me["last_heartbeat_tick"] != last_hb and failed is not None:
                break   # a heartbeat applied after the change gave up
            last_hb = me["last_heartbeat_tick"]
            m = pattern.search(log_path.read_text(errors="replace"))
            if m and failed is None:
                failed = float(m.group(1))
            time.sleep(0.1)
        log = log_path.read_text(errors="replace")
        assert failed is not None, log[-3000:]
        assert failed >= 2.0, f"the change did not wait (failed after {failed} s): the test shows nothing"
        assert worst <= MAX_GAP_TICKS, f"a heartbeat gap of {worst} ticks while the change waited"
        print(f"\nmembership change waited {failed:.1f} s and failed; the leader store's heartbeats went on "
              f"(largest gap {worst} ticks = {worst / 10:.1f} s, never down)")
        hk.close()
    finally:
        for i, p in stores.items():
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        for p in stores.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        hks.stop()
