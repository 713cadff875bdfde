"""`logtide meta serve --raft ...` (one replica of the meta-service's Raft group) and
`logtide meta status ADDR...` (each replica's role, term, leader, commit and applied index, lag)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--raft", action="store_true", help="serve one replica of the meta-service's Raft group")
    s.add_argument("--id", type=int, help="(--raft) this replica's id, a key of --peers")
    s.add_argument("--peers", help="(--raft) every founding replica's serving address: 1=HOST:PORT,2=HOST:PORT,...")
    s.add_argument("--tick", type=float, default=0.1, help="(--raft) seconds per Raft tick (default %(default)s)")
    s.add_argument("--election-tick", type=int, default=6,
                   help="(--raft) ticks without a leader before a replica campaigns (default %(default)s)")
    s.add_argument("--snapshot-entries", type=int, default=None,
                   help="(--raft) applied entries between state machine snapshots (then the log is compacted)")
    s.add_argument("--compact-keep", type=int, default=None,
                   help="(--raft) entries kept below a snapshot for lagging replicas")
    s.add_argument("--request-timeout", type=float, default=None,
                   help="(--raft) seconds a request waits for a commit when its caller names no deadline")
    s.add_argument("--clock-file", default=None, help=argparse.SUPPRESS)  # tests: the wall clock, read from a file


def register_status(msub) -> None:
    st = msub.add_parser("status", help="print each replica's role, term, leader, commit and applied index, and lag")
    st.add_argument("addresses", nargs="+", metavar="ADDR", help="HOST:PORT of a replica (several allowed)")
    st.add_argument("--json", action="store_true", help="one JSON object per replica")
    st.set_defaults(func=status)


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
                          election_tick=args.election_tick, **kw)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
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
                                "seq": r.seq, "voters": list(r.voters), "learners": list(r.learners)}))
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
