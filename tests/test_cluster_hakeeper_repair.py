"""HAKeeper repairs the log shard of a `logtide cluster` on its own: a log store is SIGKILLed;
HAKeeper (running inside the log stores) finds it down, has the shard's leader add the spare
store's replica as a learner, promotes it once caught up and removes the dead one. Every append
acknowledged before and after is still read back. The timeline is measured and printed."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.logservice import connect_logservice
from logtide.errors import LogtideError

pytestmark = pytest.mark.timeout(240)
LOG_TIMEOUT = 4   # seconds without a heartbeat before HAKeeper calls a log store down


def logtide(*args, check=True, timeout=200):
    r = subprocess.run([sys.executable, "-m", "logtide", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd="/")
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


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


def test_a_killed_log_store_is_replaced_by_the_spare(tmp_path):
    d = tmp_path / "cluster"
    r = logtide("cluster", "up", "--dir", d, "--cns", 0, "--ros", 0, "--spare-stores", 1,
                "--hakeeper-timeouts", f"log={LOG_TIMEOUT},tn=5,cn=5,primary=5,ro=5,command=5", "--json")
    table = json.loads(r.stdout)
    layout = json.loads((d / "cluster.json").read_text())
    hk_addrs = ",".join(layout["options"]["hakeeper_peers"].values())
    stores = {p["id"]: p["address"] for p in table if p["role"] in ("logservice", "spare")}
    try:
        with connect_logservice(",".join(stores[i] for i in (1, 2, 3))) as c:
            acked = {c.append(b"before %d" % i): b"before %d" % i for i in range(50)}
        hk = HAKeeperClient(hk_addrs, timeout=3.0)
        # wait until HAKeeper knows the shard's three voters from their heartbeats
        end = time.monotonic() + 30
        while time.monotonic() < end:
            sh = hk.status()["shards"].get("1", {})
            if set(sh.get("voters", {})) == {"1", "2", "3"} and sh.get("leader"):
                break
            time.sleep(0.2)
        assert set(sh["voters"]) == {"1", "2", "3"}, sh
        victim = next(i for i in (1, 2, 3) if i != sh["leader"])
        logtide("cluster", "kill", "--dir", d, f"logservice#{victim}")
        t0 = time.monotonic()
        timeline: dict[str, float] = {}
        end = t0 + 90
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
            if "4" in sh["learners"]:
                timeline.setdefault("learner added", now)
            if "4" in sh["voters"]:
                timeline.setdefault("learner added", now)
                timeline.setdefault("promoted", now)
            if "4" in sh["voters"] and str(victim) not in sh["voters"]:
                timeline.setdefault("dead removed", now)
                break
            time.sleep(0.2)
        hk.close()
        assert "dead removed" in timeline, (timeline, sh, (d / "logs" / "logservice-1.log").read_text()[-3000:])
        assert list(timeline) == ["down detected", "learner added", "promoted", "dead removed"], timeline
        live = [stores[i] for i in (1, 2, 3, 4) if i != victim]
        with connect_logservice(",".join(live)) as c:
            acked.update({c.append(b"after %d" % i): b"after %d" % i for i in range(50)})
            got = _read_all(c, min(acked), max(acked))
        lost = {lsn: (data, got.get(lsn)) for lsn, data in acked.items() if not (got.get(lsn) or b"").endswith(data)}
        assert not lost, f"acknowledged appends lost: {sorted(lost.items())[:5]} ({len(lost)} of {len(acked)})"
        print("\nrepair timeline after SIGKILL of logservice#%d (HAKeeper log timeout %d s): %s"
              % (victim, LOG_TIMEOUT, ", ".join(f"{k} {v:.1f} s" for k, v in timeline.items())))
    finally:
        down = logtide("cluster", "down", "--dir", d, check=False)
    assert down.returncode == 0, down.stderr
