"""The command-line side of a HAKeeper replica and of a store's heartbeats: the options that
`logtide hakeeper serve` and `logtide logservice serve --raft` share (`--hakeeper-id`,
`--hakeeper-peers`, `--hakeeper-dir`, the timeouts), building a HAKeeperHost from them, and the
`--hakeeper ADDRS` option every store process takes to heartbeat."""
from __future__ import annotations

import argparse

from logtide.arg_types import election_tick, positive_float, positive_int, tick_seconds
from logtide.engine.hakeeper.cluster_info import ClusterInfo
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.errors import InvalidArgument


def add_host_arguments(s: argparse.ArgumentParser, *, prefix: str = "--hakeeper-") -> None:
    s.add_argument(f"{prefix}id", dest="hakeeper_id", type=int, default=None,
                   help="run a HAKeeper replica with this id (a key of the HAKeeper peers)")
    s.add_argument(f"{prefix}peers", dest="hakeeper_peers", default=None, metavar="1=H:P,2=H:P,3=H:P",
                   help="every HAKeeper replica's serving address (its own port, not the store's)")
    s.add_argument(f"{prefix}dir", dest="hakeeper_dir", default=None, help="the HAKeeper replica's directory")
    s.add_argument("--hakeeper-tick", type=tick_seconds, default=0.1,
                   help="seconds per Raft tick of HAKeeper's group")
    s.add_argument("--hakeeper-election-tick", type=election_tick, default=6,
                   help="Raft ticks before a HAKeeper election")
    s.add_argument("--hakeeper-check-interval", type=positive_float, default=2.0, help="seconds between checker rounds")
    s.add_argument("--hakeeper-ticks-per-second", type=positive_int, default=10,
                   help="HAKeeper's logical ticks a second")
    s.add_argument("--hakeeper-timeouts", default="", metavar="ROLE=SECONDS,...",
                   help="down timeouts per role: log, tn, cn, primary, ro, command (default: the seed's)")
    s.add_argument("--hakeeper-log-shards", type=int, default=1, help="log shards HAKeeper bootstraps")
    s.add_argument("--hakeeper-log-replicas", type=int, default=3, help="voters per log shard")
    s.add_argument("--hakeeper-non-voting-replicas", type=int, default=0,
                   help="non-voting replicas (learners that stay learners) per log shard")
    s.add_argument("--hakeeper-tn-shards", type=int, default=1, help="TN shards")
    s.add_argument("--hakeeper-no-bootstrap", action="store_true",
                   help="the leader does not propose the cluster info (someone else bootstraps HAKeeper)")


def add_sender_argument(s: argparse.ArgumentParser, *, store_id: bool = False) -> None:
    s.add_argument("--hakeeper", default=None, metavar="H:P,H:P,H:P",
                   help="heartbeat to HAKeeper at these replica addresses once a second (default: no heartbeats)")
    if store_id:
        s.add_argument("--hakeeper-store-id", default=None, help="this store's id at HAKeeper")


def start_sender(args: argparse.Namespace, role, default_id: str, address: str, report, run_command=None):
    """The heartbeat sender --hakeeper asks for (started), or None. `report(store_id)` builds a heartbeat;
    `run_command(store_id)` gives what carries out a schedule command (None: commands are logged)."""
    if not getattr(args, "hakeeper", None):
        return None
    from logtide.engine.hakeeper.heartbeat_sender import HeartbeatSender
    sid = getattr(args, "hakeeper_store_id", None) or default_id
    run = run_command(sid) if run_command is not None else None
    return HeartbeatSender(args.hakeeper, role, sid, address, lambda: report(sid), run_command=run).start()


_TIMEOUT_NAMES = {"log": "log_store_timeout", "tn": "tn_store_timeout", "cn": "cn_store_timeout",
                  "primary": "primary_timeout", "ro": "ro_timeout", "command": "command_timeout"}


def config_from_args(args: argparse.Namespace) -> HAKeeperConfig:
    kw: dict = {"ticks_per_second": args.hakeeper_ticks_per_second}
    for part in filter(None, (p.strip() for p in (args.hakeeper_timeouts or "").split(","))):
        role, sep, secs = part.partition("=")
        if not sep or role not in _TIMEOUT_NAMES:
            raise InvalidArgument(f"--hakeeper-timeouts: expected ROLE=SECONDS with ROLE in {sorted(_TIMEOUT_NAMES)}, "
                                  f"got {part!r}")
        try:
            kw[_TIMEOUT_NAMES[role]] = float(secs)
        except ValueError:
            raise InvalidArgument(f"--hakeeper-timeouts: {part!r}: seconds must be a number") from None
    return HAKeeperConfig(**kw)


def host_from_args(args: argparse.Namespace):
    """The HAKeeperHost the options ask for, or None when --hakeeper-id is absent."""
    if args.hakeeper_id is None:
        return None
    from logtide.engine.hakeeper.replica_host import HAKeeperHost
    from logtide.engine.logservice.replicated import parse_peers
    if not args.hakeeper_peers or not args.hakeeper_dir:
        raise InvalidArgument("--hakeeper-id needs --hakeeper-peers and --hakeeper-dir")
    info = None if args.hakeeper_no_bootstrap else ClusterInfo(
        log_shards=args.hakeeper_log_shards, log_replicas=args.hakeeper_log_replicas,
        non_voting_replicas=args.hakeeper_non_voting_replicas, tn_shards=args.hakeeper_tn_shards)
    return HAKeeperHost(args.hakeeper_dir, args.hakeeper_id, parse_peers(args.hakeeper_peers),
                        config=config_from_args(args), cluster_info=info, tick_interval=args.hakeeper_tick,
                        election_tick=args.hakeeper_election_tick, check_interval=args.hakeeper_check_interval)
