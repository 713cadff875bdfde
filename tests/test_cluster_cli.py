"""`logtide cluster` as a user runs it: `up` a whole local cluster of separate processes, drive a
workload through every service's client (log service, meta-service, primary and RO node, TN and
a CN), `status --json`, bad commands (a second `up`, unknown processes), `kill`, and `down`,
after which no process of the cluster is left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from logtide.engine.cluster.process_state import running
from logtide.engine.logservice import connect_logservice
from logtide.engine.meta.client import connect_meta
from logtide.engine.rpc import connect
from logtide.replay.replication_rpc import REPLAY_NODE

pytestmark = pytest.mark.timeout(300)
REL = 16384


def logtide(*args, check=True, timeout=240):
    r = subprocess.run([sys.executable, "-m", "logtide", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd="/")
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def _until(cond, timeout, what):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.1)


def test_up_workload_status_kill_down(tmp_path):
    d = tmp_path / "cluster"
    r = logtide("cluster", "up", "--dir", d, "--cns", 1, "--ros", 1, "--spare-stores", 1, "--tn-load", 20, "--json")
    table = json.loads(r.stdout)
    layout = json.loads((d / "cluster.json").read_text())
    assert [(p["role"], p["id"]) for p in table] == [(p["role"], p["id"]) for p in layout["processes"]]
    assert {p["role"] for p in table} == {"logservice", "spare", "meta", "primary", "ro", "tn", "cn"}
    assert all(p["state"] == "up" for p in table)
    by = {(p["role"], p["id"]): p for p in table}
    pids = [(p["pid"], p["start_time"]) for p in layout["processes"]]
    try:
        logs = ",".join(p["address"] for p in table if p["role"] == "logservice")
        with connect_logservice(logs) as c:                       # the log shard
            lsns = [c.append(b"cluster %d" % i) for i in range(20)]
            assert lsns == sorted(lsns) and len(set(lsns)) == 20
        metas = [p["address"] for p in table if p["role"] == "meta"]
        with connect_meta(",".join(metas)) as m:                   # the meta group
            m.upsert("cluster/k", b"v1")
        with connect_meta(metas[-1]) as m:                        # one replica's address: forwarded or led
            assert m.get("cluster/k").data == b"v1"
        pc = connect(REPLAY_NODE, by[("primary", 1)]["address"], carrier="wire", timeout=20)
        rc = connect(REPLAY_NODE, by[("ro", 1)]["address"], carrier="wire", timeout=20)
        try:
            tids = [pc.Insert(rel=REL, data=b"tuple %d" % i) for i in range(30)]
            for i, t in enumerate(tids):                          # the RO node replays them lazily
                _until(lambda: rc.Get(rel=REL, block=t.block, slot=t.slot).found, 30, f"tuple {i} on the RO")
                assert rc.Get(rel=REL, block=t.block, slot=t.slot).data == b"tuple %d" % i
        finally:
            pc.close()
            rc.close()
        from logtide.engine.logtail import ComputeNode
        from logtide.engine.logtail.transport import RemoteStream
        from logtide.engine.objectstore import ObjectStore
        tn_addr = by[("tn", 1)]["address"]
        cn = ComputeNode(lambda: RemoteStream(tn_addr, "test"), ObjectStore(d / "data" / "tn" / "objects"), "test")
        try:
            cn.subscribe("t")
            _until(lambda: cn.read("t", cn.watermark("t")).num_rows > 0, 60, "the TN's load reaches a CN")
        finally:
            cn.close()
        cn_log = d / "logs" / "cn-1.log"                          # the cluster's own CN reads it too
        _until(lambda: any(json.loads(x).get("rows", 0) > 0 for x in cn_log.read_text().splitlines()
                           if x.startswith("{")), 60, "cn#1 reads rows")

        st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
        assert [p["state"] for p in st["processes"]] == ["up"] * len(table)
        assert all(p["status"]["ok"] for p in st["processes"]), st
        assert st["log_shard"]["replicas"] == 3 and st["log_shard"]["healthy"] == 3
        assert st["log_shard"]["leader"] in {1, 2, 3} and st["meta_group"]["leader"] in {1, 2, 3}
        # HAKeeper runs inside the first three log stores; every process heartbeats to it
        assert len(layout["options"]["hakeeper_peers"]) == 3
        everyone = {"log-1", "log-2", "log-3", "log-4", "primary-1", "ro-1", "tn-1", "cn-1"}

        def hakeeper():
            return json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
        _until(lambda: set(hakeeper()["hakeeper"].get("stores", {})) == everyone, 30, "every store registers")
        st = hakeeper()
        hk = st["hakeeper"]
        assert hk["tick"] > 0 and hk["role"] == "leader" and isinstance(st["pending_commands"], list)
        assert all(v["heartbeated"] and not v["down"] for v in hk["stores"].values()), hk["stores"]

        again = logtide("cluster", "up", "--dir", d, check=False)
        assert again.returncode == 2 and "already has a running cluster" in again.stderr
        for bad, why in (("bogus#1", "the roles are"), ("ro#9", "has no ro#9"), ("ro", "ROLE#N")):
            r = logtide("cluster", "kill", "--dir", d, bad, check=False)
            assert r.returncode == 2 and why in r.stderr, r.stderr

        logtide("cluster", "kill", "--dir", d, "cn#1")
        st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
        assert {(p["role"], p["id"]): p["state"] for p in st["processes"]}[("cn", 1)] == "down"
        r = logtide("cluster", "kill", "--dir", d, "cn#1", check=False)
        assert r.returncode == 2 and "not running" in r.stderr
    finally:
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
    assert not [pid for pid, started in pids if running(pid, started)]
    st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
    assert {p["state"] for p in st["processes"]} == {"down"}


def test_commands_on_a_directory_without_a_cluster(tmp_path):
    for cmd in ("status", "down"):
        r = logtide("cluster", cmd, "--dir", tmp_path, check=False)
        assert r.returncode == 2 and "holds no cluster" in r.stderr
    (tmp_path / "cluster.json").write_text("{not json")
    r = logtide("cluster", "status", "--dir", tmp_path, check=False)
    assert r.returncode == 2 and "does not read as a cluster layout" in r.stderr
    record = {"role": "tn", "id": 1, "address": "127.0.0.1:1", "argv": [], "log": "x.log", "pid": "abc"}
    (tmp_path / "cluster.json").write_text(json.dumps({"version": 1, "processes": [record]}))
    for cmd in ("status", "down"):      # a TypeError deep in status/down, once
        r = logtide("cluster", cmd, "--dir", tmp_path, check=False)
        assert r.returncode == 2 and "malformed process record" in r.stderr and "pid" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = logtide("cluster", "up", "--dir", tmp_path / "x", "--log-replicas", 0, check=False)
    assert r.returncode == 2 and "at least 1" in r.stderr
