"""`logtide meta serve --raft ...` (one replica of the meta-service's Raft group),
`logtide meta status ADDR...` (each replica's role, term, leader, commit and applied index, lag) and
`logtide meta member add --learner ID=HOST:PORT | promote ID | remove ID` (membership, through any
replica: forwarded to the leader)."""
from __future__ import annotations

import argparse
import json
import sys

from logtide.arg_types import election_tick, non_negative_int, positive_float, positive_int, tick_seconds
from logtide.stop_signal import stop_event


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--raft", action="store_true", help="serve one replica of the meta-service's Raft group")
    s.add_argument("--id", type=int, help="(--raft) this replica's id, a key of --peers")
    s.add_argument("--peers", help="(--raft) every founding replica's serving address: 1=HOST:PORT,2=HOST:PORT,...")
    s.add_argument("--group", type=positive_int, default=1,
                   help="(--raft) the Raft group's id, the same on every replica of the group (default %(default)s): "
                        "a batch for another group is refused, and with --tls-peer-ids a certificate naming "
                        "logtide:raft:GROUP:ID speaks for node ID in this group only")
    s.add_argument("--tick", type=tick_seconds, default=0.1,
                   help="(--raft) seconds per Raft tick (default %(default)s)")
    s.add_argument("--election-tick", type=election_tick, default=6,
                   help="(--raft) ticks without a leader before a replica campaigns (default %(default)s)")
    s.add_argument("--snapshot-entries", type=positive_int, default=None,
                   help="(--raft) applied entries between state machine snapshots (then the log is compacted)")
    s.add_argument("--compact-keep", type=non_negative_int, default=None,
                   help="(--raft) entries kept below a snapshot for lagging replicas")
    s.add_argument("--request-timeout", type=positive_float, default=None,
                   help="(--raft) seconds a request waits for a commit when its caller names no deadline")
    s.add_argument("--join", action="store_true",
                   help="(--raft) a new replica, not a founder: it waits to be added with `meta member add --learner`")
    s.add_argument("--clock-file", default=None, help=argparse.SUPPRESS)  # tests: the wall clock, read from a file


def register_status(msub) -> None:
    st = msub.add_parser("status", help="print each replica's role, term, leader, commit and applied index, and lag")
    st.add_argument("addresses", nargs="+", metavar="ADDR", help="HOST:PORT of a replica (several allowed)")
    st.add_argument("--json", action="store_true", help="one JSON object per replica")
    st.set_defaults(func=status)


def register_member(msub) -> None:
    m = msub.add_parser("member", help="change the membership of a meta-service Raft group (through any replica)")
    msub_m = m.add_subparsers(dest="member_cmd", required=True)
    add = msub_m.add_parser("add", help="add a replica (started with `meta serve --raft --join`) as a learner")
    add.add_argument("--learner", required=True, metavar="ID=HOST:PORT", help="the new replica's id and address")
    promote = msub_m.add_parser("promote", help="make a learner a voter, once it has caught up")
    promote.add_argument("id", type=int, metavar="ID")
    remove = msub_m.add_parser("remove", help="remove a member (refused when the voters left would lose quorum)")
    remove.add_argument("id", type=int, metavar="ID")
    for p in (add, promote, remove):
        p.add_argument("--meta", required=True, metavar="H1:P1[,H2:P2...]", help="any replica's address (or several)")
        p.add_argument("--timeout", type=positive_float, default=30.0,
                       help="seconds before giving up (default %(default)s)")
        p.set_defaults(func=member)


def member(args: argparse.Namespace) -> int:
    """One membership change; prints the membership after it, or the typed error (exit status 2)."""
    from logtide.engine.meta.client import connect_meta
    from logtide.errors import LogtideError, MetaInvalidArgument
    try:
        with connect_meta(args.meta, timeout=args.timeout) as c:
            if args.member_cmd == "add":
                node, sep, addr = args.learner.partition("=")
                if not sep or not node.isdigit():
                    raise MetaInvalidArgument(f"--learner takes ID=HOST:PORT, got {args.learner!r}")
                m = c.add_learner(int(node), addr)
            elif args.member_cmd == "promote":
                m = c.promote_member(args.id)
            else:
                m = c.remove_member(args.id)
    except LogtideError as exc:
        print(f"logtide meta member {args.member_cmd}: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return 2
    nodes = ", ".join(f"{n.node_id}={n.address} ({n.role})" for n in m["nodes"].values())
    print(f"voters {m['voters']} learners {m['learners']} nodes: {nodes}", flush=True)
    return 0


class FileClock:
    """Milliseconds read from a file (an integer): what tests use to drive every replica's clock."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> int:
        with open(self.path) as f:
            return int(f.read().strip())


def serve_raft(args: argparse.Namespace) -> int:
    from logtide.engine.logservice.replicated import parse_peers
    from logtide.engine.meta.replica import MetaReplica
    from logtide.errors import MetaInvalidArgument
    if args.id is None or not args.peers or not args.dir:
        raise MetaInvalidArgument("--raft needs --id, --peers and --dir")
    peers = parse_peers(args.peers)
    if args.id not in peers:
        raise MetaInvalidArgument(f"--id {args.id} is not one of --peers ({sorted(peers)})")
    kw = {k: v for k, v in (("snapshot_entries", args.snapshot_entries), ("compact_keep", args.compact_keep),
                            ("request_timeout", args.request_timeout)) if v is not None}
    if args.clock_file:
        kw["clock"] = FileClock(args.clock_file)
    listen = args.listen if args.listen != "127.0.0.1:0" else peers[args.id]
    replica = MetaReplica(args.dir, args.id, peers, listen, tick_interval=args.tick,
                          election_tick=args.election_tick, join=args.join, cluster_id=args.group, **kw)
    stop = stop_event()
    # the first line names the bound address: scripts and tests read it
    print(f"meta-service listening on {replica.address} (raft replica {args.id}, peers {args.peers})", flush=True)
    try:
        while not stop.wait(10.0):
            s = replica.status()
            print(f"meta-service replica {args.id}: {s['role']} term {s['term']} leader {s['lead']} "
                  f"commit {s['commit']} applied {s['applied']} seq {s['seq']}", flush=True)
    finally:
        replica.close()
        print("meta-service stopped", flush=True)
    return 0


def status(args: argparse.Namespace) -> int:
    from logtide.engine.meta import meta_pb2 as pb
    from logtide.engine.meta.server import META
    from logtide.engine.rpc import connect
    from logtide.errors import LogtideError
    rows, failed = [], 0
    for addr in args.addresses:
        try:
            c = connect(META, addr, connect_timeout=3.0, timeout=3.0)
            try:
                r = c.invoke("Status", pb.StatusRequest(consistency="stale"))
            finally:
                c.close()
            rows.append((addr, {"id": r.id, "role": r.role or "single", "term": r.term, "leader": r.leader_id,
                                "leader_address": r.leader, "commit": r.commit_index, "applied": r.applied_index,
                                "seq": r.seq, "voters": list(r.voters), "learners": list(r.learners),
                                "nodes": {str(n.id): {"address": n.address, "role": n.role} for n in r.nodes}}))
        except LogtideError as exc:
            rows.append((addr, {"error": str(exc)}))
            failed += 1
    top = max((r.get("commit", 0) for _a, r in rows), default=0)
    for addr, r in rows:
        if "error" not in r:
            r["lag"] = max(0, top - r["applied"])
        if args.json:
            print(json.dumps({"address": addr, **r}, sort_keys=True))
        elif "error" in r:
            print(f"{addr}  unreachable: {r['error']}")
        else:
            print(f"{addr}  id {r['id']}  {r['role']:<13} term {r['term']}  leader {r['leader']}  "
                  f"commit {r['commit']}  applied {r['applied']}  lag {r['lag']}  seq {r['seq']}")
    sys.stdout.flush()
    return 1 if failed == len(rows) else 0
