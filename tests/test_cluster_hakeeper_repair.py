"""HAKeeper repairs the log shard of a `logtide cluster` on its own: a log store is SIGKILLed;
HAKeeper (running inside the log stores) finds it down, has the shard's leader add the spare
store's replica as a learner, promotes it once caught up and removes the dead one; the spare is
then listed as a `logservice`. The dead store is started again: its replica is a zombie, which
HAKeeper has it kill, and the store, a spare now, takes the next repair (a second voter is
SIGKILLed): HAKeeper adds a replica with a new id on it, the store starts it (START_REPLICA),
and it is promoted. Every append acknowledged before, between and after is still read back.
The timelines are measured and printed."""
from __future__ import annotations

import json
import time

import pytest
from cluster_run import logtide, until

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.logservice import connect_logservice
from logtide.errors import LogtideError

pytestmark = pytest.mark.timeout(240)
LOG_TIMEOUT = 4   # seconds without a heartbeat before HAKeeper calls a log store down




def _read_all(c, first, last):
    out, lsn = {}, first
    while lsn <= last:
        recs, nxt = c.read(lsn, 1 << 20)
        for r in recs:
            out[r.lsn] = r.data
        if nxt <= lsn:
            break
        lsn = nxt
    return out


def _processes(d) -> dict:
    st = json.loads(logtide("cluster", "status", "--dir", d, "--json").stdout)
    return {p["id"]: p for p in st["processes"] if p["role"] in ("logservice", "spare")}




def _repair(hk, d, victim: int, newcomer: str) -> tuple[dict, dict]:
    """SIGKILL log store `victim`; the timeline of its replacement by a replica on store `newcomer`."""
    logtide("cluster", "kill", "--dir", d, f"logservice#{victim}")
    t0 = time.monotonic()
    timeline: dict[str, float] = {}
    end, sh, new = t0 + 90, {}, None
    while time.monotonic() < end:
        try:
            st = hk.status()
        except LogtideError:
            time.sleep(0.2)
            continue
        now = time.monotonic() - t0
        sh = st["shards"]["1"]
        if st["stores"][f"log-{victim}"]["down"]:
            timeline.setdefault("down detected", now)
        new = new or next((int(r) for r, s in {**sh["learners"], **sh["voters"]}.items()
                           if s == newcomer and int(r) != victim), None)
        if new is not None and str(new) in sh["learners"]:
            timeline.setdefault("learner added", now)
        if new is not None and str(new) in sh["voters"]:
            timeline.setdefault("learner added", now)
            timeline.setdefault("promoted", now)
        if new is not None and str(new) in sh["voters"] and str(victim) not in sh["voters"]:
            timeline.setdefault("dead removed", now)
            break
        time.sleep(0.2)
    assert "dead removed" in timeline, (timeline, sh, (d / "logs" / "logservice-1.log").read_text()[-3000:])
    assert list(timeline) == ["down detected", "learner added", "promoted", "dead removed"], timeline
    return timeline, sh


def test_a_killed_log_store_is_replaced_and_comes_back_as_a_spare(tmp_path):
    d = tmp_path / "cluster"
    r = logtide("cluster", "up", "--dir", d, "--cns", 0, "--ros", 0, "--spare-stores", 1, "--meta-replicas", 1,
                "--hakeeper-timeouts", f"log={LOG_TIMEOUT},tn=5,cn=5,primary=5,ro=5,command=5", "--json")
    table = json.loads(r.stdout)
    layout = json.loads((d / "cluster.json").read_text())
    hk = HAKeeperClient(",".join(layout["options"]["hakeeper_peers"].values()), timeout=3.0)
    stores = {p["id"]: p["address"] for p in table if p["role"] in ("logservice", "spare")}
    acked: dict[int, bytes] = {}

    def append_and_check(live: list[int], what: str) -> None:
        with connect_logservice(",".join(stores[i] for i in live)) as c:
            acked.update({c.append(b"%s %d" % (what.encode(), i)): b"%s %d" % (what.encode(), i) for i in range(50)})
            got = _read_all(c, min(acked), max(acked))
        lost = {lsn: (data, got.get(lsn)) for lsn, data in acked.items() if not (got.get(lsn) or b"").endswith(data)}
        assert not lost, f"acknowledged appends lost: {sorted(lost.items())[:5]} ({len(lost)} of {len(acked)})"

    try:
        append_and_check([1, 2, 3], "before")
        sh = until("HAKeeper knows the shard's three voters from their heartbeats",
                    lambda: (lambda s: s if set(s.get("voters", {})) == {"1", "2", "3"} and s.get("leader") else None)(
                        hk.status()["shards"].get("1", {})), 30)
        victim = next(i for i in (1, 2, 3) if i != sh["leader"])
        first, sh = _repair(hk, d, victim, "log-4")
        # the spare, a voter now, is listed as a logservice (same id, address and pid)
        four = until("the spare is listed as a logservice", lambda: (lambda p: p if p["role"] == "logservice"
                                                                      else None)(_processes(d)[4]), 15)
        assert four["state"] == "up" and four["address"] == stores[4], four
        assert four["pid"] == next(p["pid"] for p in table if p["id"] == 4 and p["role"] == "spare")
        append_and_check([i for i in (1, 2, 3, 4) if i != victim], "after")

        # the dead store comes back: its replica is a zombie; killed, the store is a spare
        logtide("cluster", "start", "--dir", d, f"logservice#{victim}")
        t1 = time.monotonic()
        back = until("the zombie is killed and its store listed as a spare",
                      lambda: (lambda p: p if p["role"] == "spare" and p["state"] == "up" else None)(
                          _processes(d)[victim]), 30)
        zombie_killed = time.monotonic() - t1
        log = (d / "logs" / f"logservice-{victim}.log").read_text()
        assert f"ran schedule command KILL_ZOMBIE shard 1 replica {victim}" in log, log[-2000:]
        assert back["address"] == stores[victim]
        # killed and started again, the store remembers its killed zombie: it opens no replica, and
        # HAKeeper has nothing to kill a second time
        zombie_dir = d / "data" / f"logservice-{victim}"
        assert (zombie_dir / "ZOMBIE_KILLED").read_text() == f"{victim}\n"
        logtide("cluster", "kill", "--dir", d, f"spare#{victim}")
        logtide("cluster", "start", "--dir", d, f"spare#{victim}")
        restarted_at = hk.status()["tick"]    # heartbeats of the killed process are older than this
        said = f"replica {victim} in {zombie_dir} was killed as a zombie: not opened"
        log_path = d / "logs" / f"logservice-{victim}.log"
        until("the restarted store finds its zombie marker", lambda: said in log_path.read_text(), 20)
        until("the restarted store heartbeats with no replica", lambda: (lambda s: s["heartbeated"] and s.get(
            "replicas") == [] and not s["down"] and s["last_heartbeat_tick"] > restarted_at)(
            hk.status()["stores"][f"log-{victim}"]), 20)
        log = log_path.read_text()
        assert log.count("ran schedule command KILL_ZOMBIE") == 1, log[-3000:]
        # the next repair goes to it: a new replica id, started there by START_REPLICA
        leader = hk.status()["shards"]["1"]["leader"]
        second_victim = next(int(r) for r in sh["voters"] if int(r) != leader)
        victim_store = sh["voters"][str(second_victim)]
        second, sh = _repair(hk, d, int(victim_store.split("-")[1]), f"log-{victim}")
        new = next(int(r) for r, s in sh["voters"].items() if s == f"log-{victim}")
        assert new > 4, sh                                 # a fresh id from HAKeeper, not the zombie's
        log = (d / "logs" / f"logservice-{victim}.log").read_text()
        assert f"ran schedule command START_REPLICA shard 1 replica {new}" in log, log[-2000:]
        until("the store is listed as a logservice again", lambda: _processes(d)[victim]["role"] == "logservice", 15)
        live = [int(s.split("-")[1]) for s in sh["voters"].values()]
        append_and_check(live, "last")
        print("\nrepair timeline after SIGKILL of logservice#%d (HAKeeper log timeout %d s): %s"
              % (victim, LOG_TIMEOUT, ", ".join(f"{k} {v:.1f} s" for k, v in first.items())))
        print("zombie killed %.1f s after logservice#%d started again; second repair onto it (replica %d): %s"
              % (zombie_killed, victim, new, ", ".join(f"{k} {v:.1f} s" for k, v in second.items())))
    finally:
        hk.close()
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
