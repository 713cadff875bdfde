"""`logtide hakeeper serve` (one HAKeeper replica on its own, as the log stores run it inside them)
and `logtide hakeeper status ADDRS` (HAKeeper's state from its leader, as JSON)."""
from __future__ import annotations

import argparse
import json
import sys

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
    st.add_argument("--timeout", type=float, default=3.0)
    st.set_defaults(func=status)


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
