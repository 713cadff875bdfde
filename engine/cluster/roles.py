"""The command line of each role of a local cluster, and where its data and log live under D.

Each process is `logtide ...` with the same Python as the caller, so the cluster runs the
installed logtide that started it; TLS options reach every process through LOGTIDE_TLS_*.
"""
from __future__ import annotations

import os
import sys

from logtide.engine.cluster.layout import ProcessRecord

TABLE = "t"          # the table the TN serves and the CNs subscribe to
HAKEEPER_REPLICAS = 3   # HAKeeper replicas run inside the first log stores
# short HAKeeper timeouts for a local cluster (seconds; the seed's are minutes for log stores)
HAKEEPER_TIMEOUTS = "log=15,tn=5,cn=5,primary=5,ro=5,command=5"


def hakeeper_arg(opts: dict) -> list:
    """`--hakeeper ADDRS` for every process of a cluster that runs HAKeeper (none for an older cluster.json)."""
    peers = opts.get("hakeeper_peers")
    return ["--hakeeper", ",".join(a for _i, a in sorted(peers.items(), key=lambda kv: int(kv[0])))] if peers else []


def hakeeper_replica_arg(d: str, i: int, opts: dict) -> list:
    """The options of log store i's HAKeeper replica, when it hosts one."""
    peers = opts.get("hakeeper_peers") or {}
    if str(i) not in peers:
        return []
    return ["--hakeeper-id", str(i), "--hakeeper-peers", peers_arg({int(k): v for k, v in peers.items()}),
            "--hakeeper-dir", os.path.join(d, "data", f"hakeeper-{i}"), "--hakeeper-tick", str(opts["tick"]),
            "--hakeeper-check-interval", "1",
            "--hakeeper-timeouts", opts.get("hakeeper_timeouts") or HAKEEPER_TIMEOUTS,
            "--hakeeper-log-replicas", str(opts.get("log_replicas", 3)),
            "--hakeeper-non-voting-replicas", str(opts.get("non_voting_replicas", 0))]


def logindex_arg(opts: dict) -> list:
    """`--logindex-segments N` for the primary and RO nodes when `up` was given one."""
    n = opts.get("logindex_segments")
    return ["--logindex-segments", str(n)] if n else []


def logtide_argv(*args: str) -> list:
    return [sys.executable, "-m", "logtide", *args]


def peers_arg(addresses: dict) -> str:
    return ",".join(f"{i}={a}" for i, a in sorted(addresses.items()))


def log_store(d: str, i: int, address: str, peers: dict, opts: dict, join: bool = False) -> ProcessRecord:
    """A log-service store: one replica of the log shard (`--join`: a spare that waits to be added)."""
    role = "spare" if join else "logservice"
    argv = logtide_argv("logservice", "serve", "--raft", "--id", str(i), "--peers", peers_arg(peers),
                        "--listen", address, "--dir", os.path.join(d, "data", f"{role}-{i}"),
                        "--tick", str(opts["tick"]), "--stats-interval", "5", *(["--join"] if join else []),
                        "--cluster-dir", d,
                        *([] if join else hakeeper_replica_arg(d, i, opts)), *hakeeper_arg(opts))
    return ProcessRecord(role, i, address, argv, os.path.join(d, "logs", f"{role}-{i}.log"))


def meta_replica(d: str, i: int, peers: dict, opts: dict) -> ProcessRecord:
    argv = logtide_argv("meta", "serve", "--raft", "--id", str(i), "--peers", peers_arg(peers),
                        "--dir", os.path.join(d, "data", f"meta-{i}"), "--tick", str(opts["tick"]))
    return ProcessRecord("meta", i, peers[i], argv, os.path.join(d, "logs", f"meta-{i}.log"))


def primary(d: str, address: str, log_addresses: str, opts: dict) -> ProcessRecord:
    argv = logtide_argv("replay", "primary", "--dir", os.path.join(d, "data", "shared"), "--listen", address,
                        "--log", log_addresses, "--replica-timeout", str(opts["replica_timeout"]),
                        *logindex_arg(opts), *hakeeper_arg(opts), "--hakeeper-store-id", "primary-1")
    return ProcessRecord("primary", 1, address, argv, os.path.join(d, "logs", "primary-1.log"))


def ro_node(d: str, i: int, address: str, primary_address: str, log_addresses: str, opts: dict) -> ProcessRecord:
    argv = logtide_argv("replay", "ro", "--dir", os.path.join(d, "data", "shared"), "--primary", primary_address,
                        "--listen", address, "--node-id", str(i), "--log", log_addresses,
                        "--replica-timeout", str(opts["replica_timeout"]), *logindex_arg(opts),
                        *hakeeper_arg(opts), "--hakeeper-store-id", f"ro-{i}")
    return ProcessRecord("ro", i, address, argv, os.path.join(d, "logs", f"ro-{i}.log"))


def tn(d: str, address: str, opts: dict) -> ProcessRecord:
    argv = logtide_argv("logtail", "tn", os.path.join(d, "data", "tn"), "--address", address, "--table", TABLE,
                        "--load", str(opts.get("tn_load", 0)), *hakeeper_arg(opts))
    return ProcessRecord("tn", 1, address, argv, os.path.join(d, "logs", "tn-1.log"))


def cn(d: str, i: int, tn_address: str, opts: dict | None = None) -> ProcessRecord:
    argv = logtide_argv("logtail", "cn", "--tn", tn_address, "--objects", os.path.join(d, "data", "tn", "objects"),
                        "--table", TABLE, *hakeeper_arg(opts or {}), "--hakeeper-store-id", f"cn-{i}")
    return ProcessRecord("cn", i, "", argv, os.path.join(d, "logs", f"cn-{i}.log"))
