"""Durable single-row writes from many clients, sustained: the TN (single-row insert transactions)
and the replication primary (single-tuple inserts) against PostgreSQL 15 (pgbench -T with a
single-row INSERT, synchronous_commit=on, fsync=on), started in a temporary directory by this module.

Every write is acknowledged only once it is on disk: the TN and the primary log through a log
service with fsync="always" (group commit), PostgreSQL flushes its WAL at each commit.
Each system runs for the same time (10 s at full scale) with 1, 4, 16 and 32 clients, at its steady
state: PostgreSQL's figure is the tps pgbench reports without initial connection time; logtide's
client threads are started and its service opened before the clock starts (bench/sustained.py).
The ratios use those steady rates, not a round's wall time (which holds pgbench's process start).
At 16 clients each side also runs confined to one CPU (logtide.cpu_affinity; PostgreSQL's server
and pgbench together), and the one-CPU ratios take PostgreSQL's faster run of the two placements.
The plot shows throughput second by second at 16 clients (a decay shows) and against client count.
Figures: writes per fsync (group-commit factor), process CPU us per write (all threads; the GIL
lets about one core of it run at a time, so it bounds the throughput near 1e6 / that figure) and
context switches per write (wake-ups and GIL hand-offs).
"""
from __future__ import annotations

import itertools

import pytest

from bench.conftest import cpu_pair_or_skip
from bench.ratios import Ratio
from bench.sustained import PGBENCH_SECONDS, SECONDS, run_sustained

CLIENTS = (1, 4, 16, 32)
REL = 16384
TUPLE = b"\x5a" * 100

RATIOS = [
    Ratio("TN: single-row insert transactions, 16 client threads, durable, sustained vs PostgreSQL 15 pgbench -T "
          "-c 16 single-row INSERT, synchronous_commit=on (tps without connection time)", "test_tn_insert_txn[16]",
          "test_pg_insert_txn[16]", 1.5, 27),
    Ratio("replication primary: single-tuple inserts, 16 backends, durable, sustained vs the same PostgreSQL run",
          "test_primary_insert[16]", "test_pg_insert_txn[16]", 1.5, 27),
    # each side in the placement it does best in: logtide confined to one CPU (logtide.cpu_affinity),
    # PostgreSQL's faster run of two CPUs and one (its server and pgbench confined the same way)
    Ratio("TN confined to one CPU: single-row insert transactions, 16 client threads vs PostgreSQL's best run "
          "(2 CPUs, or server and pgbench confined to one CPU)", "test_tn_insert_txn_one_cpu",
          ("test_pg_insert_txn[16]", "test_pg_insert_txn_one_cpu"), 1.5, 27),
    Ratio("replication primary confined to one CPU: single-tuple inserts, 16 backends vs PostgreSQL's best run "
          "(2 CPUs, or one)", "test_primary_insert_one_cpu",
          ("test_pg_insert_txn[16]", "test_pg_insert_txn_one_cpu"), 1.5, 27),
] + [
    # the other client counts of the plot, as ratios: the issue sets its goal at 16
    Ratio(f"TN: single-row insert transactions, {c} client thread{'s' if c > 1 else ''} vs PostgreSQL, {c} "
          f"client{'s' if c > 1 else ''} (sustained)", f"test_tn_insert_txn[{c}]", f"test_pg_insert_txn[{c}]",
          None, 27)
    for c in (1, 4, 32)
] + [
    Ratio(f"replication primary: single-tuple inserts, {c} backend{'s' if c > 1 else ''} vs PostgreSQL, {c} "
          f"client{'s' if c > 1 else ''} (sustained)", f"test_primary_insert[{c}]", f"test_pg_insert_txn[{c}]",
          None, 27)
    for c in (1, 4, 32)
]

PG_SCRIPT = "INSERT INTO t (v) VALUES (:client_id);\n"


def _record(benchmark, run, **figures) -> None:
    """The sustained run's steady rate and series into extra_info (bench.report reads `rate`)."""
    f = run.figures()
    benchmark.extra_info.update(items=run.ops, clients=run.clients, rate=f.pop("rate"),
                                per_second=f.pop("per_second"), seconds=f.pop("seconds"))
    f.pop("ops")
    benchmark.extra_info["figures"] = {**figures, **f}


@pytest.fixture(scope="module", params=CLIENTS, ids=str)
def clients(request) -> int:
    """A module-scoped parameter: pytest then runs PostgreSQL, the TN and the primary at one client
    count one after another, before the next count, so each ratio compares runs minutes apart at
    most (this machine is shared and its load drifts)."""
    return request.param


@pytest.fixture(scope="module")
def pg():
    from bench.pg_peer import PgPeer, pg_available
    reason = pg_available()
    if reason:
        pytest.skip(f"PostgreSQL peer not run: {reason}")
    with PgPeer() as peer:
        peer.sql("CREATE TABLE t (id bigserial PRIMARY KEY, v bigint NOT NULL)")
        yield peer


def _pg_run(benchmark, pg, clients: int, cpus=None) -> None:
    runs = []
    benchmark.pedantic(lambda: runs.append(pg.pgbench(PG_SCRIPT, clients, PGBENCH_SECONDS, cpus=cpus)), rounds=1,
                       iterations=1)
    run = runs[0]
    assert run.ops > 0
    benchmark.extra_info.update(items=run.ops, clients=clients, rate=run.rate, per_second=run.per_second,
                                seconds=run.seconds, cpus=sorted(cpus) if cpus else "all")


def _tn_run(benchmark, tmp_path, clients: int) -> None:
    from logtide import LogService
    from logtide.engine.logtail import TransactionNode
    from logtide.engine.objectstore import ObjectStore
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(tmp_path / "objects"))
    ids = itertools.count()
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")

        def commit(k):
            x = tn.begin()
            x.insert("t", {"id": [next(ids)], "v": [k]})
            x.commit()
        g0, n0, runs = log.stats()["groups"], tn.committer.items, []
        benchmark.pedantic(lambda: runs.append(run_sustained(clients, SECONDS, commit)), rounds=1, iterations=1)
        # the log's own flushes: each one write + one fdatasync
        _record(benchmark, runs[0],
                commits_per_fsync=(tn.committer.items - n0) / max(1, log.stats()["groups"] - g0))
    finally:
        tn.close()
        log.close()


def _primary_run(benchmark, tmp_path, clients: int) -> None:
    from logtide.replay.primary import Primary
    primary = Primary(tmp_path, pool_pages=8192)
    try:
        log = primary.log_service
        g0, n0, runs = log.stats()["groups"], primary.committer.items, []
        benchmark.pedantic(lambda: runs.append(run_sustained(clients, SECONDS, lambda k: primary.insert(REL, TUPLE))),
                           rounds=1, iterations=1)
        _record(benchmark, runs[0],
                records_per_fsync=(primary.committer.items - n0) / max(1, log.stats()["groups"] - g0))
    finally:
        primary.close()


@pytest.mark.benchmark(group="durable-writes")
def test_pg_insert_txn(benchmark, pg, clients):
    _pg_run(benchmark, pg, clients)


@pytest.mark.benchmark(group="durable-writes")
def test_tn_insert_txn(benchmark, tmp_path, clients):
    _tn_run(benchmark, tmp_path, clients)


@pytest.mark.benchmark(group="durable-writes")
def test_primary_insert(benchmark, tmp_path, clients):
    _primary_run(benchmark, tmp_path, clients)


# The same runs at 16 clients with each side confined to one CPU (after every client count above,
# one after another). logtide's Python runs on one CPU at a time (the GIL); its threads then wake
# each other without waking a second CPU (bench/bench_wake_cost.py). The TN, the primary and their
# log are opened inside the confinement, so every thread they start shares it.

@pytest.mark.benchmark(group="durable-writes-one-cpu")
def test_pg_insert_txn_one_cpu(benchmark, pg):
    _pg_run(benchmark, pg, 16, cpus=cpu_pair_or_skip()[0])


@pytest.mark.benchmark(group="durable-writes-one-cpu")
def test_tn_insert_txn_one_cpu(benchmark, tmp_path):
    from logtide.cpu_affinity import confined
    with confined(cpu_pair_or_skip()[0]):
        _tn_run(benchmark, tmp_path, 16)


@pytest.mark.benchmark(group="durable-writes-one-cpu")
def test_primary_insert_one_cpu(benchmark, tmp_path):
    from logtide.cpu_affinity import confined
    with confined(cpu_pair_or_skip()[0]):
        _primary_run(benchmark, tmp_path, 16)


LINES = {"TN insert transactions": "test_tn_insert_txn", "primary tuple inserts": "test_primary_insert",
         "PostgreSQL 15 pgbench INSERT": "test_pg_insert_txn"}


def plot(benchmarks: dict, outdir):
    """Left: durable writes per second, second by second, at 16 clients (a decay shows). Right: the
    steady rate against client count. One line per system."""
    from pathlib import Path

    from bench.throughput_plot import draw_by_clients, series
    over_time = {label: benchmarks.get(f"{prefix}[16]", {}).get("extra_info", {}).get("per_second")
                 for label, prefix in LINES.items()}
    by_clients = {label: series(benchmarks, prefix) for label, prefix in LINES.items()}
    if not any(over_time.values()) and not any(by_clients.values()):
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    for label, ys in over_time.items():
        if ys:
            left.plot(range(1, len(ys) + 1), ys, marker=".", label=label)
    left.set_xlabel("second of the run")
    left.set_ylabel("durable writes per second")
    left.set_title("16 clients, second by second")
    left.set_ylim(bottom=0)
    left.grid(True, alpha=0.3)
    left.legend()
    draw_by_clients(right, by_clients, "steady rate against client count", "durable writes per second")
    fig.suptitle("durable single-row writes (fsync on every acknowledged write), sustained runs")
    out = Path(outdir) / "durable_writes.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]
