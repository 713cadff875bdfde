"""`logtide replay primary|ro`: a primary or an RO node as its own process over one shared directory."""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from logtide.stop_signal import stop_event


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="physical replication: a primary or an RO node over a shared directory")
    roles = p.add_subparsers(dest="role", required=True)
    pp = roles.add_parser("primary", help="the read-write node: embeds the log service and serves it")
    pp.add_argument("--dir", required=True, help="the shared directory (pages, log, logindex)")
    pp.add_argument("--listen", default="127.0.0.1:0", help="host:port to serve on (port 0 picks one)")
    pp.add_argument("--port-file", default=None, help="write the bound port here once serving")
    pp.add_argument("--checkpoint-interval", type=float, default=1.0)
    pp.add_argument("--pool-pages", type=int, default=2048, help="buffer pool frames (8 KiB each)")
    pp.add_argument("--logindex-segments", type=int, default=None,
                    help="LogIndex memtable segments (default: the full size; small: tables saved, and the WAL "
                         "truncated, after fewer records)")
    pp.add_argument("--replica-timeout", type=float, default=None,
                    help="drop an RO node silent this many seconds (default 10; 0: never)")
    pp.add_argument("--log", default=None, metavar="H1:P1,H2:P2,H3:P3",
                    help="write the WAL to a replicated log service (its replicas' addresses) instead of "
                         "embedding one in --dir")
    pp.add_argument("--log-deadline", type=float, default=15.0,
                    help="with --log: give up a log call (a typed error) when no replica leads for this long")
    from logtide.engine.hakeeper.host_cli import add_sender_argument
    add_sender_argument(pp, store_id=True)
    pp.set_defaults(func=_guarded(run_primary))
    rp = roles.add_parser("ro", help="a read-only node: lazy replay of the primary's WAL meta")
    rp.add_argument("--dir", required=True, help="the shared directory")
    rp.add_argument("--primary", required=True, help="host:port of the primary")
    rp.add_argument("--listen", default="127.0.0.1:0")
    rp.add_argument("--port-file", default=None)
    rp.add_argument("--node-id", type=int, default=1)
    rp.add_argument("--mode", choices=("lazy", "eager"), default="lazy")
    rp.add_argument("--logindex-segments", type=int, default=None, help="LogIndex memtable segments")
    rp.add_argument("--replica-timeout", type=float, default=None,
                    help="the primary's replica timeout: stop serving (and re-sync) after 0.8 of it without "
                         "an acknowledged report (default 10)")
    rp.add_argument("--log", default=None, metavar="H1:P1,H2:P2,H3:P3",
                    help="the primary's replicated log service: read the WAL from it (default: from the primary)")
    rp.add_argument("--log-deadline", type=float, default=15.0,
                    help="with --log: give up a log call (a typed error) when no replica leads for this long")
    add_sender_argument(rp, store_id=True)
    rp.set_defaults(func=_guarded(run_ro))


def _guarded(fn):
    """Report a logtide error (log in use, primary unreachable, corrupt state) as one line, exit 2."""
    def run(args: argparse.Namespace) -> int:
        from logtide.errors import LogtideError
        try:
            return fn(args)
        except LogtideError as exc:
            print(f"logtide replay {args.role}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 2
    return run


def _write_port(path: str | None, port: int) -> None:
    if path:
        tmp = path + ".tmp"
        Path(tmp).write_text(str(port))
        os.replace(tmp, path)


class Holder:
    """The node a process serves; promotion replaces an RO node by a primary."""

    def __init__(self, node, server, log_service=None, link=None, shared_log=None):
        self.node = node
        self.shared_log = shared_log   # a replicated log client: a promoted node writes to it
        self.server = server
        self.log_service = log_service
        self.link = link
        self.lock = threading.Lock()

    def status(self) -> dict:
        from logtide.replay.primary import Primary
        node = self.node
        role = "primary" if isinstance(node, Primary) else "ro"
        return {"role": role, **node.stats()}

    def promote(self) -> None:
        from logtide.engine.logservice.rpc_service import LOGSERVICE, LogServiceServicer
        from logtide.replay.primary import Primary
        from logtide.replay.replication_rpc import REPLICATION, ReplicationServicer
        with self.lock:
            if isinstance(self.node, Primary):
                return
            ro = self.node
            primary = ro.promote(self.shared_log)   # closes the link, opens the shared log, redoes the WAL
            self.node = primary
            self.log_service = primary.log_service
            if self.shared_log is None:   # RO nodes of a replicated log read it there, not from us
                self.server.add_service(LOGSERVICE, LogServiceServicer(primary.log_service,
                                                                       self.server.max_message_size))
            self.server.add_service(REPLICATION, ReplicationServicer(primary))


def _serve(holder: Holder, what: str) -> int:
    stop = stop_event()
    last = 0.0
    while not stop.wait(0.2):
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            st = holder.status()
            keys = ("role", "write_lsn", "applied_lsn", "consistent_lsn", "truncated_lsn")
            print(f"[{what}] " + " ".join(f"{k}={st[k]}" for k in keys if k in st), flush=True)
    holder.server.stop(grace=0.5)
    holder.node.close()
    return 0


def run_primary(args: argparse.Namespace) -> int:
    from logtide.engine.logservice import LogService
    from logtide.engine.logservice.rpc_service import LOGSERVICE, LogServiceServicer
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.replay.primary import LOG_DIR, Primary
    from logtide.replay.replication_rpc import REPLAY_NODE, REPLICATION, NodeServicer, ReplicationServicer
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    if args.log:
        from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
        log_service = ReplicatedLogServiceClient(args.log, deadline=args.log_deadline)
    else:
        log_service = LogService.open(d / LOG_DIR)
    from logtide.replay.replica_set import REPLICA_TIMEOUT_S
    try:
        primary = Primary(d, log=log_service, checkpoint_interval=args.checkpoint_interval,
                          pool_pages=args.pool_pages, logindex_segments=args.logindex_segments,
                          replica_timeout=REPLICA_TIMEOUT_S if args.replica_timeout is None else args.replica_timeout)
    except BaseException:
        log_service.close()
        raise
    server = DualServer(args.listen, max_message_size=64 << 20, workers=16, grpc_workers=16)
    holder = Holder(primary, server, log_service, shared_log=log_service if args.log else None)
    if not args.log:   # RO nodes of a replicated log read the WAL from the log service itself
        server.add_service(LOGSERVICE, LogServiceServicer(log_service, server.max_message_size))
    server.add_service(REPLICATION, ReplicationServicer(primary))
    server.add_service(REPLAY_NODE, NodeServicer(holder))
    port = server.start()
    print(f"primary serving on {server.address} (recovered {primary.recovered_records} WAL records, "
          f"write LSN {primary.write_lsn})", flush=True)
    _write_port(args.port_file, port)
    from logtide.engine.hakeeper.host_cli import start_sender
    from logtide.engine.hakeeper.store_reports import primary_report
    from logtide.engine.hakeeper.store_role import StoreRole
    sender = start_sender(args, StoreRole.PRIMARY, "primary-1", server.address,
                          lambda sid: primary_report(primary, sid))
    hold = None
    if args.hakeeper:   # the WAL is truncated no further than HAKeeper's truncation LSN
        from logtide.engine.hakeeper.truncation_hold import TruncationHold
        hold = TruncationHold(args.hakeeper, primary).start()
    try:
        rc = _serve(holder, "primary")
    finally:
        if hold is not None:
            hold.stop()
        if sender is not None:
            sender.stop()
    log_service.close()
    return rc


def run_ro(args: argparse.Namespace) -> int:
    from logtide.engine.logservice import connect_logservice
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.replay.ro_node import ReadOnlyNode
    from logtide.replay.replication_rpc import REPLAY_NODE, ReplicationLink, NodeServicer
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    remote_log = (ReplicatedLogServiceClient(args.log, deadline=args.log_deadline) if args.log
                  else connect_logservice(args.primary))   # the primary's DualServer
    try:
        ro = ReadOnlyNode(args.dir, remote_log, node_id=args.node_id, mode=args.mode,
                          logindex_segments=args.logindex_segments)
    except BaseException:
        remote_log.close()
        raise
    if args.replica_timeout is not None:
        ro.replica_timeout = args.replica_timeout
    link = ReplicationLink(ro, args.primary)
    server = DualServer(args.listen, max_message_size=64 << 20, workers=16, grpc_workers=16)
    holder = Holder(ro, server, None, link, shared_log=remote_log if args.log else None)
    server.add_service(REPLAY_NODE, NodeServicer(holder))
    port = server.start()
    print(f"RO node {args.node_id} ({args.mode}) serving on {server.address}, following {args.primary} "
          f"from LSN {ro.applied_lsn + 1}", flush=True)
    _write_port(args.port_file, port)
    from logtide.engine.hakeeper.host_cli import start_sender
    from logtide.engine.hakeeper.store_reports import ro_report
    from logtide.engine.hakeeper.store_role import StoreRole
    sender = start_sender(args, StoreRole.RO, f"ro-{args.node_id}", server.address, lambda sid: ro_report(ro, sid))
    try:
        rc = _serve(holder, f"ro{args.node_id}")
    finally:
        if sender is not None:
            sender.stop()
    remote_log.close()
    return rc
