"""The schedule commands no checker of a healthy `cluster up` issues, carried out by real processes.

A `logtide cluster` (separate processes on loopback, HAKeeper inside the log stores) is given
commands through HAKeeper's operator path (`OperatorSchedule`); each reaches its store in the
reply to that store's next heartbeat, and its effect shows in what the store then reports:

- `STOP_REPLICA` closes a follower's replica (it stays a voter); the log checker finds a member
  not running and sends `START_REPLICA`, which reopens it from its own directory; it catches up
  and every acknowledged append is read back through it.
- the cluster wants one non-voting replica: the log checker's `ADD_NON_VOTING_REPLICA` makes the
  spare's replica a Raft learner, which is never promoted. `STOP_NON_VOTING_REPLICA` closes it and
  the checker's `START_NON_VOTING_REPLICA` reopens it; `REMOVE_NON_VOTING_REPLICA` takes it out of
  the membership, its store kills it as a zombie, and the checker adds a new one there, which the
  store starts.
- `STOP_TN` (given from the shell: `logtide hakeeper schedule`) stops the TN process; HAKeeper
  finds its TN down and has it started again.
- commands naming unknown stores or replicas, or HAKeeper's own types, are refused, typed, and
  HAKeeper's tick goes on.

And one the TN checker issues itself: a TN shard served by two TN stores is stopped on one.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from cluster_run import cluster_processes, logtide, until
from hakeeper_procs import LOGTIDE
from ports import free_ports

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.hakeeper.schedule_command import CommandType as C
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.logservice import connect_logservice
from logtide.errors import MalformedCommandError, UnknownReplicaError, UnknownStoreError

pytestmark = pytest.mark.timeout(180)
TIMEOUTS = "log=15,tn=2,cn=5,primary=5,ro=5,command=5"
LIFETIME = 50   # ticks an operator's command stays in flight


def process_log(d):
    """log_of(role, n): the text of D/logs/<role>-<n>.log."""
    return lambda role, i: (d / "logs" / f"{role}-{i}.log").read_text(errors="replace")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_start_non_voting_and_stop_tn_are_carried_out_by_the_stores(tmp_path):
    d = tmp_path / "cluster"
    r = logtide("cluster", "up", "--dir", d, "--cns", 0, "--ros", 0, "--spare-stores", 1, "--meta-replicas", 1,
                "--non-voting-replicas", 1, "--hakeeper-timeouts", TIMEOUTS, "--json")
    table = json.loads(r.stdout)
    layout = json.loads((d / "cluster.json").read_text())
    hk = HAKeeperClient(",".join(layout["options"]["hakeeper_peers"].values()), timeout=3.0)
    stores = {p["id"]: p["address"] for p in table if p["role"] in ("logservice", "spare")}
    log_of = process_log(d)
    timeline: dict[str, float] = {}
    try:
        sh = until("HAKeeper knows the shard's three voters and its leader",
                   lambda: (lambda s: s if set(s.get("voters", {})) == {"1", "2", "3"} and s.get("leader") else None)(
                       hk.status()["shards"].get("1", {})), 30)
        leader_store = sh["voters"][str(sh["leader"])]
        v = next(i for i in (1, 2, 3) if i != sh["leader"])
        with connect_logservice(",".join(stores[i] for i in (1, 2, 3))) as c:
            acked = {c.append(b"before %d" % i): b"before %d" % i for i in range(50)}

        def runs(st, store):   # the replica ids a store's last heartbeat reported
            return [x["replica"] for x in st["stores"][store].get("replicas", [])]

        # STOP_REPLICA: the follower's replica closes and stays a voter; START_REPLICA reopens it
        t0 = time.monotonic()
        assert hk.schedule([ScheduleCommand(C.STOP_REPLICA, f"log-{v}", 1, v, f"log-{v}")], LIFETIME) == 1
        st = until(f"log-{v} reports no replica", lambda: (lambda s: s if runs(s, f"log-{v}") == [] else None)(
            hk.status()), 15, step=0.1)
        timeline["replica stopped"] = time.monotonic() - t0
        assert str(v) in st["shards"]["1"]["voters"], st["shards"]["1"]
        until(f"log-{v} runs replica {v} again", lambda: runs(hk.status(), f"log-{v}") == [v], 15, step=0.1)
        timeline["replica started again"] = time.monotonic() - t0
        log = log_of("logservice", v)
        assert f"ran schedule command STOP_REPLICA shard 1 replica {v}" in log, log[-2000:]
        assert f"ran schedule command START_REPLICA shard 1 replica {v}@log-{v} -> log-{v}: replica {v} opened" \
            in log, log[-2000:]
        with connect_logservice(",".join(stores[i] for i in (1, 2, 3))) as c:
            acked.update({c.append(b"after %d" % i): b"after %d" % i for i in range(50)})
        last = max(acked)
        until(f"replica {v} caught up", lambda: any(x["latest_lsn"] >= last for x in hk.status()["stores"][
            f"log-{v}"].get("replicas", [])), 15)
        got, lsn = {}, min(acked)
        with connect_logservice(",".join(stores[i] for i in (1, 2, 3))) as c:
            while lsn <= last:
                recs, lsn = c.read(lsn, 1 << 20)
                got.update({rec.lsn: rec.data for rec in recs})
                if not recs:
                    break
        assert all(got.get(lsn, b"").endswith(data) for lsn, data in acked.items()), "acknowledged appends lost"

        # the cluster wants one non-voting replica: the log checker added one on the spare store as a
        # Raft learner, and it stays one
        sh = until("the spare store runs a non-voting learner", lambda: (lambda st: st["shards"]["1"] if any(
            st["shards"]["1"]["learners"].get(str(r)) == "log-4" for r in runs(st, "log-4")) else None)(
            hk.status()), 20, step=0.1)
        nv = next(int(r) for r, store in sh["learners"].items() if store == "log-4")
        assert sh["non_voting"] == [nv] and str(nv) not in sh["voters"], sh
        end = time.monotonic() + 3
        while time.monotonic() < end:   # promote_lag is long passed: a voting learner would be promoted now
            sh = hk.status()["shards"]["1"]
            assert str(nv) in sh["learners"] and str(nv) not in sh["voters"], sh
            time.sleep(0.2)
        log = log_of("logservice", leader_store.split("-")[1])
        assert f"ran schedule command ADD_NON_VOTING_REPLICA shard 1 replica {nv}@log-4" in log, log[-2000:]

        # STOP_NON_VOTING_REPLICA closes it; the checker's START_NON_VOTING_REPLICA reopens it
        t0 = time.monotonic()
        assert hk.schedule([ScheduleCommand(C.STOP_NON_VOTING_REPLICA, "log-4", 1, nv, "log-4")], LIFETIME) == 1
        until("log-4 reports no replica", lambda: runs(hk.status(), "log-4") == [], 15, step=0.1)
        timeline["non-voting replica stopped"] = time.monotonic() - t0
        until(f"log-4 runs replica {nv} again", lambda: runs(hk.status(), "log-4") == [nv], 15, step=0.1)
        timeline["non-voting replica started again"] = time.monotonic() - t0
        assert f"ran schedule command START_NON_VOTING_REPLICA shard 1 replica {nv}@log-4 -> log-4: replica {nv} " \
            "opened" in log_of("spare", 4)

        # REMOVE_NON_VOTING_REPLICA takes it out of the membership; its replica is then a zombie, killed,
        # and the checker adds a new non-voting replica on that store, which the store starts
        t0 = time.monotonic()
        assert hk.schedule([ScheduleCommand(C.REMOVE_NON_VOTING_REPLICA, leader_store, 1, nv, "log-4")],
                           LIFETIME) == 1
        until(f"replica {nv} leaves the membership", lambda: str(nv) not in hk.status()["shards"]["1"]["learners"],
              15, step=0.1)
        timeline["non-voting replica removed"] = time.monotonic() - t0
        sh = until("a new non-voting replica runs on log-4", lambda: (lambda st: st["shards"]["1"] if any(
            st["shards"]["1"]["learners"].get(str(r)) == "log-4" and r != nv for r in runs(st, "log-4")) else None)(
            hk.status()), 25, step=0.1)
        timeline["new non-voting replica running"] = time.monotonic() - t0
        new = next(int(r) for r, store in sh["learners"].items() if store == "log-4")
        assert new > nv and sh["non_voting"] == [new] and str(new) not in sh["voters"], sh
        spare_log = log_of("spare", 4)
        assert f"ran schedule command KILL_ZOMBIE shard 1 replica {nv}@log-4" in spare_log, spare_log[-2000:]
        assert f"ran schedule command START_NON_VOTING_REPLICA shard 1 replica {new}@log-4 -> log-4: replica " \
            f"{new} opened" in spare_log, spare_log[-2000:]

        # bad operator input: typed refusals, and HAKeeper goes on ticking
        tick = hk.status()["tick"]
        with pytest.raises(UnknownReplicaError):
            hk.schedule([ScheduleCommand(C.STOP_REPLICA, "log-1", 1, 99, "log-1")], LIFETIME)
        with pytest.raises(UnknownStoreError):
            hk.schedule([ScheduleCommand(C.STOP_TN, "tn-9", 1, 1, "tn-9")], LIFETIME)
        with pytest.raises(MalformedCommandError):
            hk.schedule([ScheduleCommand(C.DELETE_CN_STORE, "tn-1")], LIFETIME)
        with pytest.raises(MalformedCommandError):
            hk.schedule([ScheduleCommand(C.STOP_TN, "tn-1", 1, 1, "tn-1")], 0)
        bad = logtide("hakeeper", "schedule", ",".join(layout["options"]["hakeeper_peers"].values()),
                      "STOP_REPLICA", "log-1", "--replica", 99, check=False)
        assert bad.returncode == 2 and "replica 99" in bad.stderr, (bad.returncode, bad.stdout, bad.stderr)
        bad = logtide("hakeeper", "schedule", "127.0.0.1:1", "NO_SUCH_COMMAND", "log-1", check=False)
        assert bad.returncode == 2 and "unknown schedule command type" in bad.stderr, bad.stderr
        until("HAKeeper's tick goes on", lambda: hk.status()["tick"] > tick + 5, 5)

        # STOP_TN: the TN process stops; HAKeeper finds the TN down and has it started again
        pid0 = cluster_processes(d)[("tn", 1)]["pid"]
        t0 = time.monotonic()
        addrs = ",".join(layout["options"]["hakeeper_peers"].values())   # this one from the shell, as an operator
        out = logtide("hakeeper", "schedule", addrs, "STOP_TN", "tn-1", "--replica", 1, "--timeout-ticks", LIFETIME)
        assert json.loads(out.stdout)["taken"] == 1, out.stdout
        until("the TN process stops", lambda: not _alive(pid0), 15, step=0.1)
        timeline["TN stopped"] = time.monotonic() - t0
        assert "HAKeeper stopped TN shard 1 on tn-1 (STOP_TN)" in log_of("tn", 1)
        tn = until("the TN is started again", lambda: (lambda p: p if p["state"] == "up" and p["pid"] != pid0
                                                       else None)(cluster_processes(d)[("tn", 1)]), 30)
        timeline["TN started again"] = time.monotonic() - t0
        assert tn["address"] == next(p["address"] for p in table if p["role"] == "tn")
        print("\nstore commands timeline (s after the command was queued): "
              + ", ".join(f"{k} {t:.1f}" for k, t in timeline.items()))
    finally:
        hk.close()
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr


def test_a_tn_shard_found_on_two_stores_is_stopped_on_one_by_the_tn_checker(tmp_path):
    """A second TN process (store tn-2) serves TN shard 1 beside the cluster's tn-1: the TN checker
    keeps one (the highest replica id, then store id: tn-2) and sends STOP_TN to the other, which
    stops; the shard then runs on one store, and HAKeeper starts nothing again (tn-2 runs it)."""
    d = tmp_path / "cluster"
    logtide("cluster", "up", "--dir", d, "--cns", 0, "--ros", 0, "--spare-stores", 0, "--meta-replicas", 1,
            "--hakeeper-timeouts", TIMEOUTS)
    layout = json.loads((d / "cluster.json").read_text())
    addrs = ",".join(layout["options"]["hakeeper_peers"].values())
    hk = HAKeeperClient(addrs, timeout=3.0)
    log_of = process_log(d)
    second = None
    try:
        until("HAKeeper hears tn-1", lambda: hk.status()["stores"].get("tn-1", {}).get("heartbeated"), 20)
        pid1 = cluster_processes(d)[("tn", 1)]["pid"]
        port = free_ports(1)[0]
        second = subprocess.Popen([LOGTIDE, "logtail", "tn", str(tmp_path / "tn2"), "--address", f"127.0.0.1:{port}",
                                   "--hakeeper", addrs, "--hakeeper-store-id", "tn-2"],
                                  stdout=open(tmp_path / "tn2.log", "wb"), stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        until("HAKeeper hears tn-2", lambda: hk.status()["stores"].get("tn-2", {}).get("heartbeated"), 20)
        heard = time.monotonic() - t0
        until("tn-1 stops", lambda: not _alive(pid1), 15, step=0.1)
        stopped = time.monotonic() - t0
        assert "HAKeeper stopped TN shard 1 on tn-1 (STOP_TN)" in log_of("tn", 1)
        store_logs = lambda: "".join(log_of("logservice", i) for i in (1, 2, 3))   # noqa: E731
        assert "schedules STOP_TN shard 1 -> tn-1" in store_logs()
        until("tn-1 is down at HAKeeper", lambda: hk.status()["stores"]["tn-1"]["down"], 10)
        # a START_TN while the cluster came up (tn-1 slow to heartbeat under load) is not the point
        starts = store_logs().count("START_TN")
        time.sleep(3)   # more checker rounds: tn-2 runs the shard, so nothing starts tn-1 again
        assert second.poll() is None
        assert not _alive(pid1) and cluster_processes(d)[("tn", 1)]["state"] == "down"
        assert store_logs().count("START_TN") == starts
        print(f"\ntn-2 heard {heard:.1f} s after its start; tn-1 stopped by STOP_TN {stopped:.1f} s after it")
    finally:
        hk.close()
        if second is not None:
            second.terminate()
            second.wait(10)
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
