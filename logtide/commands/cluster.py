"""`logtide cluster up|status|kill|start|down --dir D`: a whole local cluster as separate processes."""
from __future__ import annotations

import argparse
import json

from logtide.arg_types import non_negative_float, non_negative_int, positive_int, tick_seconds


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="a local cluster of separate processes on loopback (up, status, kill, down)")
    cmds = p.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    cmds.required = True

    u = cmds.add_parser("up", help="start a cluster under --dir and return once it is healthy")
    u.add_argument("--dir", required=True, help="the cluster's directory (cluster.json, logs/, data/)")
    u.add_argument("--log-replicas", type=positive_int, default=None,
                   help="log-service stores in the log shard (default 3)")
    u.add_argument("--meta-replicas", type=positive_int, default=None, help="meta-service replicas (default 3)")
    u.add_argument("--cns", type=non_negative_int, default=None, help="compute nodes following the TN (default 2)")
    u.add_argument("--ros", type=non_negative_int, default=None,
                   help="read-only nodes following the primary (default 2)")
    u.add_argument("--spare-stores", type=non_negative_int, default=None, help="log stores kept spare (default 1)")
    u.add_argument("--non-voting-replicas", type=non_negative_int, default=None,
                   help="non-voting replicas of the log shard HAKeeper keeps on spare stores (default 0)")
    u.add_argument("--tick", type=tick_seconds, default=None,
                   help="seconds per Raft tick of every group (default 0.05)")
    u.add_argument("--tn-load", type=non_negative_int, default=None,
                   help="transactions per second the TN commits to its table t on its own (default 0)")
    u.add_argument("--replica-timeout", type=non_negative_float, default=None,
                   help="seconds the primary keeps holding a silent RO node on its own (default 10)")
    u.add_argument("--logindex-segments", type=positive_int, default=None,
                   help="LogIndex memtable segments of the primary and RO nodes (default: full size)")
    u.add_argument("--hakeeper-timeouts", default=None, metavar="ROLE=SECONDS,...",
                   help="HAKeeper's down timeouts (default log=15,tn=5,cn=5,primary=5,ro=5,command=5)")
    u.add_argument("--json", action="store_true", help="print the process table as JSON")
    u.set_defaults(func=run_up)

    s = cmds.add_parser("status", help="live state: every process, leaders, terms")
    s.add_argument("--dir", required=True)
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(func=run_status)

    k = cmds.add_parser("kill", help="SIGKILL one process, named ROLE#N (e.g. logservice#2, tn#1)")
    k.add_argument("--dir", required=True)
    k.add_argument("process", metavar="ROLE#N")
    k.set_defaults(func=run_kill)

    st = cmds.add_parser("start", help="start one stopped or killed process again (same address and data), "
                                      "named ROLE#N")
    st.add_argument("--dir", required=True)
    st.add_argument("process", metavar="ROLE#N")
    st.set_defaults(func=run_start)

    d = cmds.add_parser("down", help="stop every process of the cluster")
    d.add_argument("--dir", required=True)
    d.set_defaults(func=run_down)


def _table(rows: list) -> str:
    cols = ("role", "id", "address", "pid", "state")
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    width = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    line = lambda xs: "  ".join(x.ljust(w) for x, w in zip(xs, width)).rstrip()   # noqa: E731
    return "\n".join([line(cols)] + [line(x) for x in cells])


def run_up(args: argparse.Namespace) -> int:
    from logtide.engine.cluster import local_cluster
    from logtide.engine.rpc.tls import resolve
    from logtide.errors import InvalidArgument
    tls = resolve(None)
    if tls is not None and tls.peer_ids:
        # every process gets the one certificate: each Raft replica would refuse the others
        raise InvalidArgument("cluster up gives every process the same certificate, and --tls-peer-ids needs "
                              "each Raft replica's own (naming its id): drop --tls-peer-ids")
    local_cluster.up(args.dir, log_replicas=args.log_replicas, meta_replicas=args.meta_replicas, cns=args.cns,
                     ros=args.ros, spare_stores=args.spare_stores, non_voting_replicas=args.non_voting_replicas,
                     tick=args.tick, tn_load=args.tn_load,
                     hakeeper_timeouts=args.hakeeper_timeouts, replica_timeout=args.replica_timeout,
                     logindex_segments=args.logindex_segments)
    st = local_cluster.status(args.dir, probe_live=False)
    if args.json:
        print(json.dumps(st["processes"]))
    else:
        print(_table(st["processes"]))
    return 0


def run_status(args: argparse.Namespace) -> int:
    from logtide.engine.cluster import local_cluster
    st = local_cluster.status(args.dir)
    if args.json:
        print(json.dumps(st, default=str))
        return 0
    print(_table(st["processes"]))
    for name in ("log_shard", "meta_group"):
        g = st[name]
        print(f"{name}: {g['healthy']}/{g['replicas']} healthy, leader {g['leader']}, terms {g['terms']}")
    hk = st.get("hakeeper")
    if hk is not None and "error" in hk:
        print(f"hakeeper: not answering: {hk['error']}")
    elif hk is not None:
        print(f"hakeeper: replica {hk['replica']} leads (term {hk['raft_term']}), tick {hk['tick']}, "
              f"{hk['bootstrap']}, {len(hk['pending_commands'])} pending commands")
        for sid, v in hk["stores"].items():
            print(f"  {sid:<12} {v['role']:<8} last heartbeat tick {v['last_heartbeat_tick']}"
                  f"{'  DOWN' if v['down'] else ''}")
        for c in hk["pending_commands"]:
            print(f"  pending: {c['text']}")
    for r in st["processes"]:
        if r["state"] == "up" and not r.get("status", {}).get("ok", True):
            print(f"{r['role']}#{r['id']}: not answering: {r['status']['error']}")
    return 0


def run_kill(args: argparse.Namespace) -> int:
    from logtide.engine.cluster import local_cluster
    p = local_cluster.kill(args.dir, args.process)
    print(f"killed {p.name} (pid {p.pid})")
    return 0


def _existing(d: str) -> None:
    """ClusterError ("holds no cluster") unless `d` holds a cluster: before a lock file is made there."""
    from logtide.engine.cluster.layout import ClusterLayout
    ClusterLayout.load(d)


def run_start(args: argparse.Namespace) -> int:
    from logtide.engine.cluster import local_cluster
    _existing(args.dir)
    p, started = local_cluster.start(args.dir, args.process)
    print(f"started {p.name} (pid {p.pid})" if started else f"{p.name} is already running (pid {p.pid})")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from logtide.engine.cluster import local_cluster
    _existing(args.dir)
    stopped = local_cluster.down(args.dir)
    print(f"stopped {len(stopped)} processes" + (f": {', '.join(stopped)}" if stopped else ""))
    return 0
