"""HAKeeper restarts a killed TN: in a `logtide cluster` whose TN commits on its own, the TN is
SIGKILLed; HAKeeper finds it down and has a log store start it again (same id, address and data
directory, a new pid). It recovers from its checkpoint and log: every commit acknowledged before
the kill is still there, and both CNs reconnect and end in the TN's state. The timeline is
measured and printed."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cluster_run import logtide, until

from logtide.engine.cluster.probe import probe
from logtide.engine.cluster.layout import ClusterLayout
from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.logtail import ComputeNode
from logtide.engine.logtail.transport import RemoteStream
from logtide.engine.objectstore import ObjectStore
from logtide.errors import LogtideError

pytestmark = pytest.mark.timeout(240)
TN_TIMEOUT = 2   # seconds without a heartbeat before HAKeeper calls the TN down




def _json_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def _summary(table) -> tuple[int, int, int]:
    ids = table.column("id").to_numpy()
    return table.num_rows, int(ids.sum()), int(table.column("v").to_numpy().sum())




def test_a_killed_tn_is_restarted_by_hakeeper_and_the_cns_converge(tmp_path):
    d = tmp_path / "cluster"
    logtide("cluster", "up", "--dir", d, "--ros", 0, "--spare-stores", 0, "--meta-replicas", 1, "--cns", 2,
            "--tn-load", 20, "--hakeeper-timeouts", f"log=15,tn={TN_TIMEOUT},cn=5,primary=5,ro=5,command=5")
    layout = ClusterLayout.load(str(d))
    tn = layout.find("tn#1")
    hk = HAKeeperClient(",".join(layout.options["hakeeper_peers"].values()), timeout=3.0)
    objects = str(d / "data" / "tn" / "objects")
    cn = None
    try:
        until("HAKeeper hears the TN run shard 1", lambda: (hk.status()["stores"].get("tn-1", {}).get("heartbeated")),
               30)
        cn = ComputeNode(lambda: RemoteStream(tn.address, "test"), ObjectStore(objects), "test")
        cn.subscribe("t")
        until("the TN commits", lambda: cn.read("t").num_rows > 50, 30)
        # both cluster CNs are subscribed before the kill (a CN process may still be starting)
        until("the cluster CNs report", lambda: all(any("ts" in x for x in _json_lines(d / "logs" / f"cn-{i}.log"))
                                                    for i in (1, 2)), 60)
        acked = cn.watermark("t")             # pushed to a CN: durable and acknowledged
        before = _summary(cn.read("t", acked))
        old_pid = tn.pid
        logtide("cluster", "kill", "--dir", d, "tn#1")
        t0 = time.monotonic()
        timeline: dict[str, float] = {}
        cn_logs = [d / "logs" / f"cn-{i}.log" for i in (1, 2)]
        caught_up: dict[int, dict] = {}
        end = t0 + 60
        while time.monotonic() < end and len(caught_up) < 2:
            now = lambda: time.monotonic() - t0   # noqa: E731
            try:
                st = hk.status()
            except LogtideError:
                st = None
            if st is not None:
                if st["stores"]["tn-1"]["down"]:
                    timeline.setdefault("down detected", now())
                if any(c["type"] == "START_TN" for c in st["pending_commands"]):
                    timeline.setdefault("restart issued", now())
            rec = ClusterLayout.load(str(d)).find("tn#1")
            if rec.pid != old_pid and "tn serving" not in timeline and probe(rec, timeout=0.5)["ok"]:
                timeline.setdefault("tn serving", now())
            if "tn serving" in timeline:
                for i, path in enumerate(cn_logs, 1):
                    lines = [x for x in _json_lines(path) if x.get("reconnects", 0) >= 1 and x["ts"] >= acked]
                    if lines and i not in caught_up:
                        caught_up[i] = lines[-1]
                if len(caught_up) == 2:
                    timeline["cns caught up"] = now()
            time.sleep(0.2)
        assert "cns caught up" in timeline, (timeline, caught_up, (d / "logs" / "tn-1.log").read_text()[-2000:])
        assert "down detected" in timeline and timeline["down detected"] < timeline["tn serving"], timeline
        # the command was seen pending, or the log stores' logs name it (it can finish between two polls)
        ran = [p for p in (d / "logs").glob("logservice-*.log") if "ran schedule command START_TN" in p.read_text()]
        assert "restart issued" in timeline or ran, timeline
        assert ran, "no log store logged that it ran START_TN"

        # same id, address and data directory; a new pid; `cluster status --json` shows it up
        st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
        row = next(p for p in st["processes"] if p["role"] == "tn")
        assert row["id"] == 1 and row["address"] == tn.address and row["state"] == "up" and row["pid"] != old_pid
        assert row["status"]["ok"], row
        # recovered from checkpoint + log: at least every acknowledged commit
        # (a TN serves before it logs its line, so the line may trail the probe)
        starts = until("the restarted TN logs what it recovered", lambda: (lambda s: s if len(s) == 2 else None)(
            [x for x in _json_lines(d / "logs" / "tn-1.log") if "listening" in x]), 10)
        assert starts[1]["recovered_ts"] >= acked, starts
        # the test's own CN reconnected too: the state at the acknowledged ts is unchanged
        assert _summary(cn.read("t", acked, timeout=30)) == before
        # each cluster CN ended in the TN's state: a fresh subscription to the restarted TN agrees at its ts
        fresh = ComputeNode(lambda: RemoteStream(tn.address, "check"), ObjectStore(objects), "check")
        try:
            fresh.subscribe("t")
            for i, line in caught_up.items():
                got = fresh.read("t", line["ts"], timeout=30)
                assert (got.num_rows, int(got.column("id").to_numpy().sum())) == (line["rows"], line["id_sum"]), \
                    (i, line)
        finally:
            fresh.close()
        print("\nTN restart timeline after SIGKILL (HAKeeper TN timeout %d s): %s"
              % (TN_TIMEOUT, ", ".join(f"{k} {v:.1f} s" for k, v in timeline.items())))
    finally:
        if cn is not None:
            cn.close()
        hk.close()
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
