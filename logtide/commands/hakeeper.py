"""`logtide hakeeper serve` (one HAKeeper replica on its own, as the log stores run it inside them),
`logtide hakeeper status ADDRS` (HAKeeper's state from its leader, as JSON) and `logtide hakeeper
schedule ADDRS TYPE TARGET ...` (an operator's schedule command, queued for its store)."""
from __future__ import annotations

import argparse
import json
import sys

from logtide.arg_types import positive_float
from logtide.stop_signal import stop_event


def register(sub: argparse._SubParsersAction) -> None:
    from logtide.engine.hakeeper.host_cli import add_host_arguments
    p = sub.add_parser("hakeeper", help="HAKeeper, the log service's keeper (serve a replica, status)")
    cmds = p.add_subparsers(dest="hakeeper_command", metavar="SUBCOMMAND")
    cmds.required = True
    s = cmds.add_parser("serve", help="serve one HAKeeper replica until SIGTERM/SIGINT")
    add_host_arguments(s, prefix="--")
    s.set_defaults(func=serve)
    st = cmds.add_parser("status", help="HAKeeper's tick, stores, shards and schedule commands (JSON)")
    st.add_argument("addresses", metavar="H:P[,H:P...]", help="HAKeeper replica addresses")
    st.add_argument("--timeout", type=positive_float, default=3.0,
                    help="seconds before giving up (default %(default)s)")
    st.set_defaults(func=status)
    sc = cmds.add_parser("schedule", help="queue one schedule command for a store (an operator's OperatorSchedule)")
    sc.add_argument("addresses", metavar="H:P[,H:P...]", help="HAKeeper replica addresses")
    sc.add_argument("type", help="the command type, e.g. STOP_REPLICA, STOP_TN, ADD_NON_VOTING_REPLICA")
    sc.add_argument("target", help="the store that runs it (e.g. log-2, tn-1; the shard leader's store for "
                                   "membership changes)")
    sc.add_argument("--shard", type=int, default=1, help="log or TN shard id (default 1)")
    sc.add_argument("--replica", type=int, default=0, help="replica id")
    sc.add_argument("--replica-store", default="", help="the store the replica lives on (default: the target)")
    sc.add_argument("--learner", action="store_true", help="ADD_REPLICA: add as a learner (else promote)")
    sc.add_argument("--timeout-ticks", type=int, default=100, help="ticks it stays in flight (default 100)")
    sc.add_argument("--timeout", type=positive_float, default=3.0,
                    help="seconds before giving up (default %(default)s)")
    sc.set_defaults(func=schedule)


def serve(args: argparse.Namespace) -> int:
    from logtide.engine.hakeeper.host_cli import host_from_args
    from logtide.errors import InvalidArgument
    if args.hakeeper_id is None:
        raise InvalidArgument("hakeeper serve needs --id, --peers and --dir")
    host = host_from_args(args)
    stop = stop_event()
    print(f"hakeeper: replica {host.id} serving on {host.address} (peers {args.hakeeper_peers})", flush=True)
    try:
        while not stop.wait(10.0):
            st = host.status()
            print(f"hakeeper: replica {host.id} {st['role']} term {st['raft_term']} tick {st['tick']} "
                  f"{st['bootstrap']} stores {len(st['stores'])} pending {len(st['pending_commands'])}", flush=True)
    finally:
        host.close()
        print("hakeeper: stopped", flush=True)
    return 0


def status(args: argparse.Namespace) -> int:
    from logtide.engine.hakeeper.client import HAKeeperClient
    from logtide.errors import LogtideError
    try:
        with HAKeeperClient(args.addresses, timeout=args.timeout) as c:
            print(json.dumps(c.status(), sort_keys=True), flush=True)
    except LogtideError as exc:
        print(f"logtide hakeeper status: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


def schedule(args: argparse.Namespace) -> int:
    from logtide.engine.hakeeper.client import HAKeeperClient
    from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
    from logtide.errors import InvalidArgument
    try:
        kind = CommandType[args.type.upper()]
    except KeyError:
        raise InvalidArgument(f"unknown schedule command type {args.type!r}; one of "
                              f"{', '.join(t.name for t in CommandType)}") from None
    cmd = ScheduleCommand(kind, args.target, args.shard, args.replica, args.replica_store or args.target,
                          args.learner)
    with HAKeeperClient(args.addresses, timeout=args.timeout) as c:
        taken = c.schedule([cmd], args.timeout_ticks)   # typed refusals reach the CLI's one-line error
    print(json.dumps({"command": str(cmd), "taken": taken}), flush=True)
    return 0
