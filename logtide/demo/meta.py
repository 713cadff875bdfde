"""Demo stage: the meta-service as the cluster's metadata home.

A meta-service server runs as its own process (durable when the log service is installed). The
roles of the other stages (log service, TN, RO nodes, CN, Spark driver) register with TTL leases
renewed by heartbeat, and checkpoint locations are recorded. One RO node stops heartbeating and
its lease runs out; the server is then killed with SIGKILL and restarted, and what it holds is
printed and checked. (The RO nodes' LSNs and the truncation LSN go through HAKeeper, not the
meta-service: docs/hakeeper.md, section 6.)
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ORDER = 40
NAME = "meta"
TITLE = "meta-service: TTL leases and checkpoints; kill -9 and restart"

NODES = {
    "logservice-1": {"role": "logservice", "addr": "127.0.0.1:7001"},
    "tn-1": {"role": "tn", "addr": "127.0.0.1:7002"},
    "ro-1": {"role": "ro", "addr": "127.0.0.1:7003"},
    "ro-2": {"role": "ro", "addr": "127.0.0.1:7004"},
    "cn-1": {"role": "cn", "addr": "127.0.0.1:7005"},
}
TTL_MS = 2000


def _durable() -> bool:
    try:
        import logtide.engine.logservice  # noqa: F401
        return True
    except ImportError:
        return False


def _start(workdir: Path, durable: bool):
    where = ["--dir", str(workdir / "meta")] if durable else ["--memory"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.Popen([sys.executable, "-m", "logtide", "meta", "serve", *where, "--listen", "127.0.0.1:0",
                          "--snapshot-every", "50"], stdout=subprocess.PIPE, text=True, cwd="/", env=env)
    line = p.stdout.readline()
    if not line.startswith("meta-service listening on "):
        p.kill()
        raise RuntimeError(f"meta-service did not start: {line!r}")
    return p, line.split()[-1]


def run(workdir: Path) -> bool:
    from logtide import connect_meta
    from logtide.engine.meta.cluster import ClusterMeta, Heartbeater

    durable = _durable()
    p, addr = _start(workdir, durable)
    checks = {}
    try:
        print(f"meta-service at {addr} ({'durable: log service + snapshots' if durable else 'in memory'})")
        client = connect_meta(addr)
        cm = ClusterMeta(client)
        watch = client.watch("cluster/nodes/", "cluster/nodes0")
        beats = {}
        for node_id, info in NODES.items():
            cm.register(node_id, info, TTL_MS)
            # each node heartbeats through its own connection, as separate processes would
            beats[node_id] = Heartbeater(ClusterMeta(connect_meta(addr)), node_id, TTL_MS).start()
        print(f"registered {len(NODES)} nodes with {TTL_MS} ms leases")
        cm.add_checkpoint("logtail", 800, "file:///objects/ckp/800")
        cm.add_checkpoint("logtail", 1100, "file:///objects/ckp/1100")
        cm.add_checkpoint("logindex", 900, "file:///logindex/meta@900")

        print("ro-2 stops heartbeating (as if it crashed)")
        beats["ro-2"].stop()
        t0 = time.monotonic()
        while "ro-2" in cm.nodes() and time.monotonic() - t0 < 10:
            time.sleep(0.1)        # other nodes' heartbeats are log entries: they carry the expiry
        gone_after = time.monotonic() - t0
        alive = sorted(cm.nodes())
        print(f"live nodes after {gone_after:.1f}s: {alive}")
        checks["ro-2's lease ran out, every other lease held"] = alive == sorted(set(NODES) - {"ro-2"})
        evs, until = [], time.monotonic() + 0.5
        while time.monotonic() < until:      # heartbeats are updates too: read what has arrived so far
            ev = watch.get(timeout=0.1)
            if ev is not None:
                evs.append(ev)
        removed = [e.key for e in evs if e.current is None]
        print(f"watch on cluster/nodes/: {len(evs)} events, removals: {removed}")
        checks["watch saw the expiry"] = removed == ["cluster/nodes/ro-2"]
        watch.close()
        for node_id, hb in beats.items():
            if node_id != "ro-2":
                hb.stop()
            hb.cluster.meta.close()
        seq_before = client.seq
        held_before = client.list("cluster/")
        client.close()

        if durable:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            p, addr = _start(workdir, durable)
            print(f"server killed with SIGKILL and restarted at {addr}")
        client = connect_meta(addr)
        cm = ClusterMeta(client)
        held = client.list("cluster/")
        print(f"the meta-service holds (seq {client.seq}, leader {client.leader}):")
        for k, v in held:
            exp = f"  lease until +{v.meta.expire_at_ms - int(time.time() * 1000)} ms" if v.meta.expire_at_ms else ""
            print(f"  {k:<50} seq {v.seq:>4}  {v.data.decode()}{exp}")
        checks["seq did not go back"] = client.seq >= seq_before
        checks["checkpoints are held"] = (
            [c.lsn for c in cm.checkpoints("logtail")] == [800, 1100]
            and cm.latest_checkpoint("logindex").location == "file:///logindex/meta@900")
        non_lease = [(k, v) for k, v in held_before if v.meta.expire_at_ms is None]
        checks["everything acknowledged before the kill is there"] = all(
            any(k == k2 and v.seq == v2.seq for k2, v2 in held) for k, v in non_lease)
        client.close()
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    return bool(checks) and all(checks.values())
