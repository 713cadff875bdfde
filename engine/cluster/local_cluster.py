"""up, status, kill, start and down of a local cluster (the `logtide cluster` commands).

`up` starts every process detached from the caller (its own session, output to D/logs), records
it in D/cluster.json as soon as it runs, and returns once every process answers and the log
shard and the meta group each have a leader. A process that exits while `up` waits stops the
whole start: what was started is stopped again and the error names the process and its log.
Every change to D/cluster.json is made under its lock (layout_lock.py): log stores write it too.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, Optional

from logtide.engine.cluster import process_state, roles
from logtide.engine.cluster.layout import FILE, ClusterLayout, ProcessRecord
from logtide.engine.cluster.layout_lock import locked
from logtide.engine.cluster.loopback_ports import free_ports
from logtide.engine.cluster.probe import probe
from logtide.engine.cluster.process_restart import STOPPING
from logtide.engine.cluster.spawn import spawn
from logtide.errors import ClusterError, ClusterRunningError, InvalidArgument

UP_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0
DEFAULTS = {"log_replicas": 3, "meta_replicas": 3, "cns": 2, "ros": 2, "spare_stores": 1, "tick": 0.05,
            "replica_timeout": 10.0, "tn_load": 0}


def plan(d: str, opts: dict) -> ClusterLayout:
    """The processes of a new cluster under `d`, in start order, on free loopback ports."""
    for k in ("log_replicas", "meta_replicas"):
        if opts[k] < 1:
            raise InvalidArgument(f"{k.replace('_', '-')} must be at least 1, got {opts[k]}")
    for k in ("cns", "ros", "spare_stores"):
        if opts[k] < 0:
            raise InvalidArgument(f"{k.replace('_', '-')} must not be negative, got {opts[k]}")
    n, s = opts["log_replicas"], opts["spare_stores"]
    k = min(roles.HAKEEPER_REPLICAS, n)
    ports = iter(free_ports(n + s + opts["meta_replicas"] + 2 + opts["ros"] + k))
    addr = lambda: f"127.0.0.1:{next(ports)}"                      # noqa: E731
    log_peers = {i: addr() for i in range(1, n + 1)}
    spare_addrs = {n + k: addr() for k in range(1, s + 1)}
    meta_peers = {i: addr() for i in range(1, opts["meta_replicas"] + 1)}
    # HAKeeper replicas inside the first log stores, each on a port of its own (recorded in cluster.json)
    opts["hakeeper_peers"] = {str(i): addr() for i in range(1, k + 1)}
    procs = [roles.log_store(d, i, a, log_peers, opts) for i, a in log_peers.items()]
    procs += [roles.log_store(d, i, a, {**log_peers, i: a}, opts, join=True) for i, a in spare_addrs.items()]
    procs += [roles.meta_replica(d, i, meta_peers, opts) for i in meta_peers]
    log_addresses = ",".join(log_peers.values())
    p = roles.primary(d, addr(), log_addresses, opts)
    procs.append(p)
    procs += [roles.ro_node(d, i, addr(), p.address, log_addresses, opts) for i in range(1, opts["ros"] + 1)]
    t = roles.tn(d, addr(), opts)
    procs.append(t)
    procs += [roles.cn(d, i, t.address, opts) for i in range(1, opts["cns"] + 1)]
    return ClusterLayout(os.path.abspath(d), procs, dict(opts))


def _start(layout: ClusterLayout, p: ProcessRecord) -> None:
    """Start `p` and record it, under the layout lock; a process already running (a log store
    restarted it for HAKeeper meanwhile) is adopted instead of started twice."""
    with locked(layout.dir):
        disk = ClusterLayout.load(layout.dir)
        rec = disk.get(p.role, p.id)
        if rec is not None and _running(rec):
            p.pid, p.start_time = rec.pid, rec.start_time
            return
        spawn(p, layout.dir)
        if rec is not None:
            rec.pid, rec.start_time = p.pid, p.start_time
        disk.save()


def _tail(path: str, n: int = 12) -> str:
    try:
        with open(path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace")
    except OSError:
        return ""


def _running(p: ProcessRecord) -> bool:
    return process_state.running(p.pid, p.start_time)


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + msg)
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _wait_healthy(layout: ClusterLayout, group: list, end: float, what: str,
                  ready: Optional[Callable[[dict], bool]] = None) -> None:
    """Until every process of `group` runs and answers (and `ready(answers)`), or ClusterError."""
    last_line = 0.0
    while True:
        answers = {}
        for p in group:
            if not _running(p):
                raise ClusterError(f"{p.name} exited while the cluster started; its log ({p.log}) ends:\n"
                                   f"{_tail(p.log)}")
            answers[p.name] = probe(p, timeout=1.0)
        up = [n for n, a in answers.items() if a["ok"]]
        if len(up) == len(group) and (ready is None or ready(answers)):
            return
        now = time.monotonic()
        if now >= end:
            waiting = ", ".join(f"{n} ({a.get('error', 'no leader yet')})" for n, a in answers.items()
                                if not a["ok"] or ready is not None) or what
            raise ClusterError(f"the cluster was not healthy within the deadline: waiting for {waiting}")
        if now - last_line >= 1.0:
            _progress(f"cluster up: {what}: {len(up)}/{len(group)} answering")
            last_line = now
        time.sleep(0.2)


def _has_leader(answers: dict) -> bool:
    return any(a.get("raft_role") == "leader" for a in answers.values())


def up(d: str, **options) -> ClusterLayout:
    """Start the cluster under `d` (or start again the stopped one recorded there)."""
    d = os.path.abspath(d)
    os.makedirs(d, exist_ok=True)
    with locked(d):
        if os.path.exists(os.path.join(d, FILE)):
            layout = ClusterLayout.load(d)
            live = [p.name for p in layout.processes if _running(p)]
            if live:
                raise ClusterRunningError(f"{d} already has a running cluster ({', '.join(live)}): "
                                          f"`logtide cluster down --dir {d}` first")
        else:
            opts = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
            os.makedirs(os.path.join(d, "logs"), exist_ok=True)
            os.makedirs(os.path.join(d, "data"), exist_ok=True)
            layout = plan(d, opts)
        layout.options.pop(STOPPING, None)
        layout.save()
    end = time.monotonic() + UP_TIMEOUT_S
    try:
        stores = layout.of_role("logservice") + layout.of_role("spare")
        for p in stores + layout.of_role("meta"):
            _start(layout, p)
        _wait_healthy(layout, layout.of_role("logservice"), end, "log shard", _has_leader)
        _wait_hakeeper(layout, end)
        _wait_healthy(layout, layout.of_role("meta"), end, "meta group", _has_leader)
        _wait_healthy(layout, layout.of_role("spare"), end, "spare stores")
        for role in ("primary", "ro", "tn"):
            for p in layout.of_role(role):
                _start(layout, p)
            _wait_healthy(layout, layout.of_role(role), end, role)
        for p in layout.of_role("cn"):
            _start(layout, p)
        _wait_healthy(layout, layout.of_role("cn"), end, "cn")
    except BaseException:
        down(d, quiet=True)
        raise
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    return layout


def _hakeeper_addresses(layout: ClusterLayout) -> str:
    peers = layout.options.get("hakeeper_peers") or {}
    return ",".join(a for _i, a in sorted(peers.items(), key=lambda kv: int(kv[0])))


def _wait_hakeeper(layout: ClusterLayout, end: float) -> None:
    """Until HAKeeper's group has a leader that answers (a cluster.json without HAKeeper: at once)."""
    addrs = _hakeeper_addresses(layout)
    if not addrs:
        return
    from logtide.engine.hakeeper.client import HAKeeperClient
    from logtide.errors import LogtideError
    last = None
    with HAKeeperClient(addrs, timeout=2.0, call_timeout=1.0) as c:
        while time.monotonic() < end:
            try:
                if c.status().get("role") == "leader":
                    return
            except LogtideError as exc:
                last = exc
            _progress("cluster up: HAKeeper: waiting for a leader")
            time.sleep(0.2)
    raise ClusterError(f"HAKeeper had no leader within the deadline ({type(last).__name__}: {last})")


def hakeeper_status(layout: ClusterLayout, timeout: float = 2.0) -> dict | None:
    """HAKeeper's status from its leader (tick, stores with their last heartbeat, commands), or
    {"error": ...} when no replica answers in time; None for a cluster without HAKeeper."""
    addrs = _hakeeper_addresses(layout)
    if not addrs:
        return None
    from logtide.engine.hakeeper.client import HAKeeperClient
    from logtide.errors import LogtideError
    try:
        with HAKeeperClient(addrs, timeout=timeout, call_timeout=min(1.0, timeout)) as c:
            return c.status()
    except LogtideError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def status(d: str, probe_live: bool = True) -> dict:
    """The cluster's processes (role, id, address, pid, state, and what each answered) and, per
    Raft group, its replicas, how many answer, and its leader."""
    layout = ClusterLayout.load(d)
    procs = []
    for p in layout.processes:
        state = "up" if _running(p) else "down"
        row = {"role": p.role, "id": p.id, "address": p.address, "pid": p.pid, "state": state, "log": p.log}
        if state == "up" and probe_live:
            row["status"] = probe(p)
        procs.append(row)
    out = {"dir": layout.dir, "processes": procs, "log_shard": _group(procs, "logservice"),
           "meta_group": _group(procs, "meta")}
    hk = hakeeper_status(layout) if probe_live else None
    if hk is not None:
        out["hakeeper"] = hk
        out["pending_commands"] = hk.get("pending_commands", [])
    return out


def _group(procs: list, role: str) -> dict:
    members = [r for r in procs if r["role"] == role]
    healthy = [r for r in members if r["state"] == "up" and r.get("status", {}).get("ok")]
    leaders = {r["id"] for r in healthy if r["status"].get("raft_role") == "leader"}
    return {"replicas": len(members), "healthy": len(healthy), "leader": min(leaders) if leaders else None,
            "terms": {r["id"]: r["status"].get("term") for r in healthy}}


def start(d: str, name: str) -> tuple[ProcessRecord, bool]:
    """Start process ROLE#N again (same address and data) unless it runs; (its record, started now)."""
    from logtide.engine.cluster.process_restart import restart
    return restart(d, name)


def kill(d: str, name: str) -> ProcessRecord:
    """SIGKILL the process ROLE#N (to show repair); ClusterError if it is not running."""
    layout = ClusterLayout.load(d)
    p = layout.find(name)
    if not process_state.kill(p.pid, p.start_time, signal.SIGKILL):
        raise ClusterError(f"{p.name} (pid {p.pid}) is not running")
    process_state.wait_gone(p.pid, p.start_time, 10.0)
    return p


def down(d: str, quiet: bool = False) -> list:
    """Stop every process of the cluster (SIGTERM, then SIGKILL after STOP_GRACE_S); the names stopped.
    ClusterError if any is left running."""
    d = os.path.abspath(d)
    with locked(d):   # from here on no log store restarts a process for HAKeeper (process_restart.py)
        layout = ClusterLayout.load(d)
        layout.options[STOPPING] = True
        layout.save()
    live = [p for p in reversed(layout.processes) if _running(p)]
    for p in live:
        process_state.kill(p.pid, p.start_time, signal.SIGTERM)
    end = time.monotonic() + STOP_GRACE_S
    for p in live:
        if not process_state.wait_gone(p.pid, p.start_time, max(0.0, end - time.monotonic())):
            process_state.kill(p.pid, p.start_time, signal.SIGKILL)
            process_state.wait_gone(p.pid, p.start_time, 5.0)
    left = [p.name for p in layout.processes if _running(p)]
    if left and not quiet:
        raise ClusterError(f"still running after SIGKILL: {', '.join(left)}")
    return [p.name for p in live]
