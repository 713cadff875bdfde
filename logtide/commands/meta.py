"""`logtide meta serve` (one process, or one replica of a Raft group with --raft), `logtide meta status`
and `logtide meta member ...`."""
from __future__ import annotations

import argparse
import sys

from logtide.engine.meta.replica_cli import add_serve_arguments, register_member, register_status, serve_raft
from logtide.stop_signal import stop_event


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("meta", help="the meta-service: KV with seq, CAS, TTL leases, transactions, watch")
    msub = p.add_subparsers(dest="meta_cmd", required=True)
    s = msub.add_parser("serve", help="serve a meta-service directory over gRPC")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", help="the service directory (log + snapshots; with --raft the replica's Raft "
                                     "log and snapshots); created if missing")
    where.add_argument("--memory", action="store_true", help="keep the state in memory only (lost at exit)")
    s.add_argument("--listen", default="127.0.0.1:0", help="host:port to listen on (port 0: any free port)")
    s.add_argument("--snapshot-every", type=int, default=None,
                   help="take a snapshot and truncate the log after this many entries")
    add_serve_arguments(s)
    s.set_defaults(func=serve)
    register_status(msub)
    register_member(msub)


def serve(args: argparse.Namespace) -> int:
    if args.raft:
        if args.memory or args.snapshot_every is not None:
            print("logtide meta serve: --raft keeps its own log and snapshots in --dir "
                  "(no --memory or --snapshot-every)", file=sys.stderr, flush=True)
            return 2
        return serve_raft(args)
    from logtide.engine.meta import MetaService
    from logtide.engine.meta.server import MetaServer
    from logtide.errors import LogtideError
    if args.memory:
        service = MetaService.in_memory()
    else:
        kw = {} if args.snapshot_every is None else {"snapshot_every": args.snapshot_every}
        try:
            service = MetaService.open(args.dir, **kw)
        except LogtideError as exc:   # corrupt state, a directory another process holds
            print(f"logtide meta serve: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 2
    server = MetaServer(service, args.listen).start()
    stop = stop_event()
    # the first line names the bound address: scripts and tests read it
    print(f"meta-service listening on {server.address}", flush=True)
    while not stop.wait(10.0):
        print(f"meta-service {server.address}: seq {service.seq}, applied {service.applied_index}", flush=True)
    server.stop(1.0)
    service.close()
    print("meta-service stopped", flush=True)
    sys.stdout.flush()
    return 0
