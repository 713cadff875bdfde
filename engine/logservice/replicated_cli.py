"""`logtide logservice serve --raft ...` (one replica of a replicated log service) and
`logtide logservice status ADDR...` (each replica's role, term, commit and applied index, lag)."""
from __future__ import annotations

import argparse
import json
import sys

from logtide.arg_types import election_tick, non_negative_int, positive_int, tick_seconds
from logtide.stop_signal import stop_event


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--raft", action="store_true", help="serve one replica of a Raft-replicated log service")
    s.add_argument("--id", type=int, help="(--raft) this replica's id, a key of --peers")
    s.add_argument("--peers", help="(--raft) every founding replica: 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT")
    s.add_argument("--group", type=positive_int, default=1,
                   help="(--raft) the Raft group's id, the same on every replica of the group (default %(default)s): "
                        "a batch for another group is refused, and with --tls-peer-ids a certificate naming "
                        "logtide:raft:GROUP:ID speaks for node ID in this group only")
    s.add_argument("--join", action="store_true",
                   help="(--raft) a new replica: wait to be added by the leader instead of founding a group")
    s.add_argument("--tick", type=tick_seconds, default=0.1,
                   help="(--raft) seconds per Raft tick (default %(default)s)")
    s.add_argument("--election-tick", type=election_tick, default=6,
                   help="(--raft) ticks without a leader before a replica campaigns (default %(default)s)")
    from logtide.engine.hakeeper.host_cli import add_host_arguments, add_sender_argument
    add_host_arguments(s)     # (--raft) a HAKeeper replica in this store process
    add_sender_argument(s)    # (--raft) heartbeats to HAKeeper
    s.add_argument("--store-id", default=None, help="(--raft) this store's id at HAKeeper (default log-ID)")
    s.add_argument("--cluster-dir", default=None,
                   help="(--raft) the `logtide cluster` directory this store belongs to: it restarts that "
                        "cluster's processes when HAKeeper asks (START_TN)")
    s.add_argument("--snapshot-entries", type=positive_int, default=20000,
                   help="(--raft) applied entries between state machine snapshots (default %(default)s)")
    s.add_argument("--compact-keep", type=non_negative_int, default=5000,
                   help="(--raft) entries kept below a snapshot for lagging followers (default %(default)s)")


def register_status(cmds) -> None:
    st = cmds.add_parser("status", help="print each replica's role, term, commit and applied index, and lag")
    st.add_argument("addresses", nargs="+", metavar="ADDR", help="HOST:PORT of a replica (several allowed)")
    st.add_argument("--json", action="store_true", help="one JSON object per replica")
    st.set_defaults(func=status)


def serve_raft(args: argparse.Namespace) -> int:
    from logtide.engine.logservice.replicated import ReplicatedLogService, parse_peers
    from logtide.errors import InvalidArgument
    if args.id is None or not args.peers:
        raise InvalidArgument("--raft needs --id and --peers")
    if getattr(args, "max_message_size", None) is not None:    # not ignored in silence
        raise InvalidArgument("--max-message-size is for a single-node log; a Raft replica uses the carrier's "
                              "default message limit")
    peers = parse_peers(args.peers)
    if args.id not in peers:
        raise InvalidArgument(f"--id {args.id} is not one of --peers ({sorted(peers)})")
    listen = args.listen if args.listen != "127.0.0.1:0" else peers[args.id]
    def open_replica(d: str, rid: int, members: dict, at: str, join: bool = True) -> ReplicatedLogService:
        return ReplicatedLogService.open(d, rid, members, at, join=join, cluster_id=args.group,
                                         tick_interval=args.tick,
                                         election_tick=args.election_tick, fsync=args.fsync,
                                         segment_size=args.segment_size, snapshot_entries=args.snapshot_entries,
                                         compact_keep=args.compact_keep, grpc_listen=args.grpc_listen)
    from logtide.engine.logservice.replica_slot import ReplicaSlot
    from logtide.engine.logservice.zombie_marker import killed
    # a replica HAKeeper had killed as a zombie stays closed: the store starts as a spare
    svc = None if killed(args.dir) else open_replica(args.dir, args.id, peers, listen, join=args.join)
    # HAKeeper may close the replica or open another
    slot = ReplicaSlot(svc, svc.address if svc else listen, args.dir, open_replica)
    from logtide.engine.hakeeper.host_cli import host_from_args
    try:
        hakeeper = host_from_args(args)   # None without --hakeeper-id: the store runs as before
    except BaseException:
        slot.close()
        raise
    sender = None
    if args.hakeeper:
        from logtide.engine.logservice.store_heartbeats import start_store_sender
        sender = start_store_sender(args, slot)
    stop = stop_event()
    if svc is None:
        print(f"logservice: replica {args.id} in {args.dir} was killed as a zombie: not opened; a spare store on "
              f"{listen}", flush=True)
    else:
        grpc = f", gRPC on {svc.grpc_address}" if svc.grpc_address else ""
        print(f"logservice: replica {args.id} serving {svc.dir} on {svc.address} (raft, peers {args.peers}){grpc}",
              flush=True)
    if hakeeper is not None:
        print(f"logservice: HAKeeper replica {hakeeper.id} on {hakeeper.address}", flush=True)
    try:
        while not stop.wait(args.stats_interval if args.stats_interval > 0 else None):
            with slot.lock:
                s = slot.svc.status() if slot.svc is not None else None
            if s is None:
                print("logservice: no replica (killed as a zombie; a spare store now)", flush=True)
                continue
            print(f"logservice: replica {s['id']} {s['role']} term {s['term']} leader {s['lead']} "
                  f"commit {s['commit']} applied {s['applied']}", flush=True)
    finally:
        if sender is not None:
            sender.stop()
        if hakeeper is not None:
            hakeeper.close()
        slot.close()
        print("logservice: stopped", file=sys.stderr, flush=True)
    return 0


def status(args: argparse.Namespace) -> int:
    from logtide.engine.logservice import replicated_pb2 as pb
    from logtide.engine.logservice.replicated import REPLICATED_SERVICE
    from logtide.engine.nodehost.channel import connect_replica
    from logtide.errors import LogtideError
    rows, failed = [], 0
    for addr in args.addresses:
        try:
            c = connect_replica(REPLICATED_SERVICE, addr, timeout=3.0, connect_timeout=3.0)
            try:
                rows.append((addr, json.loads(c.invoke("Status", pb.REmpty()).json)))
            finally:
                c.close()
        except LogtideError as exc:
            rows.append((addr, {"error": str(exc)}))
            failed += 1
    top = max((r.get("commit", 0) for _a, r in rows), default=0)
    for addr, r in rows:
        if args.json:
            print(json.dumps({"address": addr, **r}, sort_keys=True))
        elif "error" in r:
            print(f"{addr}  unreachable: {r['error']}")
        else:
            print(f"{addr}  id {r['id']}  {r['role']:<13} term {r['term']}  leader {r['lead']}  "
                  f"commit {r['commit']}  applied {r['applied']}  lag {top - r['applied']}")
    return 1 if failed == len(rows) else 0
