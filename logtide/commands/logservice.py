"""`logtide logservice`: serve a log directory (framed carrier, optionally gRPC), or print what it holds."""
from __future__ import annotations

import argparse
import sys

from logtide.arg_types import int_at_least, non_negative_float
from logtide.engine.logservice.log_format import MIN_MESSAGE_SIZE
from logtide.stop_signal import stop_event


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logservice", help="the durable log service (serve, inspect)")
    cmds = p.add_subparsers(dest="logservice_command", metavar="SUBCOMMAND")
    cmds.required = True

    s = cmds.add_parser("serve", help="serve a log directory until SIGTERM/SIGINT")
    s.add_argument("--dir", required=True, help="log directory (created if missing)")
    s.add_argument("--listen", default="127.0.0.1:0",
                   help="host:port of the framed carrier, which logtide's clients speak (port 0 picks a free "
                        "one; default %(default)s)")
    s.add_argument("--grpc-listen", default=None, metavar="HOST:PORT",
                   help="also serve gRPC (the interop carrier) on this host:port (default: not served)")
    s.add_argument("--fsync", default="always", choices=["always", "batch", "never"])
    s.add_argument("--segment-size", type=int, default=64 << 20, help="bytes per segment file")
    s.add_argument("--max-record-size", type=int, default=16 << 20, help="largest record data in bytes")
    s.add_argument("--max-message-size", type=int_at_least(MIN_MESSAGE_SIZE), default=None,
                   help="message limit in bytes (both carriers)")
    s.add_argument("--truncation-interval", type=non_negative_float, default=1.0,
                   help="seconds between truncation rounds (0: none)")
    s.add_argument("--stats-interval", type=non_negative_float, default=10.0,
                   help="seconds between status lines (0: none)")
    s.set_defaults(func=serve)
    from logtide.engine.logservice import replicated_cli as logservice_raft
    logservice_raft.add_serve_arguments(s)
    logservice_raft.register_status(cmds)

    i = cmds.add_parser("info", help="open a log directory (recovering it) and print its state")
    i.add_argument("--dir", required=True)
    i.set_defaults(func=info)


def serve(args: argparse.Namespace) -> int:
    from logtide.engine.logservice.dir_kind import check_replica_dir, check_single_node_dir
    if args.raft:
        from logtide.engine.logservice.replicated_cli import serve_raft
        check_replica_dir(args.dir)
        return serve_raft(args)
    check_single_node_dir(args.dir, must_exist=False)
    from logtide.engine.logservice.rpc_service import LogServiceServer
    server = LogServiceServer.open(args.dir, args.listen, max_message_size=args.max_message_size,
                                   grpc_listen=args.grpc_listen, fsync=args.fsync, segment_size=args.segment_size,
                                   max_record_size=args.max_record_size,
                                   truncation_interval=args.truncation_interval)
    stop = stop_event()
    svc = server.svc
    grpc = f", gRPC on {server.grpc_address}" if server.grpc_address else ""
    print(f"logservice: serving {svc.config().dir} on {server.address} (latest LSN {svc.get_latest_lsn()}){grpc}",
          flush=True)
    try:
        while not stop.wait(args.stats_interval if args.stats_interval > 0 else None):
            st = svc.stats()
            print(f"logservice: latest LSN {st['latest_lsn']}, truncated {svc.get_truncated_lsn()}, "
                  f"{st['segments']} segments, {st['groups']} commit groups", flush=True)
    finally:
        server.stop(grace=2.0)
        print("logservice: stopped", file=sys.stderr, flush=True)
    return 0


def info(args: argparse.Namespace) -> int:
    from logtide import LogService
    from logtide.engine.logservice.dir_kind import check_single_node_dir
    check_single_node_dir(args.dir, must_exist=True)   # info only looks: it never creates a log
    with LogService.open(args.dir, truncation_interval=0) as svc:
        st = svc.stats()
        print(f"dir:            {svc.config().dir}")
        print(f"first LSN:      {svc.get_first_lsn()}")
        print(f"latest LSN:     {st['latest_lsn']}")
        print(f"truncated LSN:  {svc.get_truncated_lsn()}")
        print(f"segments:       {st['segments']}")
        print(f"readers:        {svc.readers() or 'none'}")
    return 0
