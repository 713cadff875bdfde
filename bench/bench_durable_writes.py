"""Durable single-row writes from many clients: the TN (single-row insert transactions) and the
replication primary (single-tuple inserts) against PostgreSQL 15 (pgbench -f with a single-row
INSERT, synchronous_commit=on, fsync=on), started in a temporary directory by this module.

Every write is acknowledged only once it is on disk: the TN and the primary log through a log
service with fsync="always" (group commit), PostgreSQL flushes its WAL at each commit.
Each system runs with 1, 4, 16 and 32 clients; the plot shows throughput against client count.
Figures: writes per fsync (group-commit factor), process CPU µs per write (all threads; the GIL
lets about one core of it run at a time, so it bounds the throughput near 1e6 / that figure) and
context switches per write (wake-ups and GIL hand-offs).
"""
from __future__ import annotations

import itertools
import resource
import threading

import pytest

from bench.conftest import scaled
from bench.ratios import Ratio

CLIENTS = (1, 4, 16, 32)
REL = 16384
TUPLE = b"\x5a" * 100

RATIOS = [
    Ratio("TN: single-row insert transactions, 16 client threads, durable vs PostgreSQL 15 pgbench -f "
          "single-row INSERT, 16 clients, synchronous_commit=on", "test_tn_insert_txn[16]",
          "test_pg_insert_txn[16]", 1.0, 13),
    Ratio("replication primary: single-tuple inserts, 16 backends, durable vs the same PostgreSQL run",
          "test_primary_insert[16]", "test_pg_insert_txn[16]", 1.0, 13),
] + [
    # the other client counts of the plot, as ratios: the issue sets its goal at 16
    Ratio(f"TN: single-row insert transactions, {c} client thread{'s' if c > 1 else ''} vs PostgreSQL, {c} "
          f"client{'s' if c > 1 else ''}", f"test_tn_insert_txn[{c}]", f"test_pg_insert_txn[{c}]", None, 13)
    for c in (1, 4, 32)
] + [
    Ratio(f"replication primary: single-tuple inserts, {c} backend{'s' if c > 1 else ''} vs PostgreSQL, {c} "
          f"client{'s' if c > 1 else ''}", f"test_primary_insert[{c}]", f"test_pg_insert_txn[{c}]", None, 13)
    for c in (1, 4, 32)
]

PG_SCRIPT = "INSERT INTO t (v) VALUES (:client_id);\n"


def _per_client(clients: int) -> int:
    return max(2, scaled(4000, minimum=64) // clients)


class _Cpu:
    """Process CPU time (user + system, every thread) and context switches in the measured rounds."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.switches = 0
        self.items = 0

    def run(self, clients: int, fn, items: int) -> None:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        _in_threads(clients, fn)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        self.seconds += (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        self.switches += (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw)
        self.items += items

    def us_per_item(self) -> float:
        return 1e6 * self.seconds / max(1, self.items)

    def switches_per_item(self) -> float:
        """Context switches (voluntary + involuntary, every thread) per write: wake-ups and GIL hand-offs."""
        return self.switches / max(1, self.items)


def _in_threads(clients: int, fn) -> None:
    """fn(k) in `clients` threads at once; re-raises the first error."""
    errors: list[BaseException] = []

    def body(k):
        try:
            fn(k)
        except BaseException as exc:  # noqa: B902 - re-raised below
            errors.append(exc)
    ths = [threading.Thread(target=body, args=(k,)) for k in range(clients)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise errors[0]


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


@pytest.mark.benchmark(group="durable-writes")
def test_pg_insert_txn(benchmark, items, pg, clients):
    per = _per_client(clients)
    items(per * clients, clients=clients)

    def run():
        done = pg.pgbench(PG_SCRIPT, clients, per)
        assert done == per * clients
    benchmark.pedantic(run, rounds=3, warmup_rounds=1 if clients > 1 else 0)


@pytest.mark.benchmark(group="durable-writes")
def test_tn_insert_txn(benchmark, items, tmp_path, clients):
    from logtide import LogService
    from logtide.engine.logtail import TransactionNode
    from logtide.engine.objectstore import ObjectStore
    per = _per_client(clients)
    items(per * clients, clients=clients)
    log = LogService.open(tmp_path / "log", fsync="always", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(tmp_path / "objects"))
    ids = itertools.count()
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")

        def client(k):
            for _ in range(per):
                x = tn.begin()
                x.insert("t", {"id": [next(ids)], "v": [k]})
                x.commit()
        g0, n0, cpu = log.stats()["groups"], tn.committer.items, _Cpu()
        benchmark.pedantic(lambda: cpu.run(clients, client, per * clients), rounds=3, warmup_rounds=1)
        benchmark.extra_info["figures"] = {
            # the log's own flushes: each one write + one fdatasync
            "commits_per_fsync": (tn.committer.items - n0) / max(1, log.stats()["groups"] - g0),
            "cpu_us_per_commit": cpu.us_per_item(), "switches_per_commit": cpu.switches_per_item()}
    finally:
        tn.close()
        log.close()


@pytest.mark.benchmark(group="durable-writes")
def test_primary_insert(benchmark, items, tmp_path, clients):
    from logtide.replay.primary import Primary
    per = _per_client(clients)
    items(per * clients, clients=clients)
    primary = Primary(tmp_path, pool_pages=8192)
    try:
        def backend(k):
            for _ in range(per):
                primary.insert(REL, TUPLE)
        log = primary.log_service
        g0, n0, cpu = log.stats()["groups"], primary.committer.items, _Cpu()
        benchmark.pedantic(lambda: cpu.run(clients, backend, per * clients), rounds=3, warmup_rounds=1)
        benchmark.extra_info["figures"] = {
            "records_per_fsync": (primary.committer.items - n0) / max(1, log.stats()["groups"] - g0),
            "cpu_us_per_insert": cpu.us_per_item(), "switches_per_insert": cpu.switches_per_item()}
    finally:
        primary.close()


def plot(benchmarks: dict, outdir):
    """Durable writes per second against client count, one line per system."""
    from bench.throughput_plot import throughput_plot
    return throughput_plot(benchmarks, outdir, "durable_writes.png",
                           {"TN insert transactions": "test_tn_insert_txn",
                            "primary tuple inserts": "test_primary_insert",
                            "PostgreSQL 15 pgbench INSERT": "test_pg_insert_txn"},
                           "durable single-row writes (fsync on every acknowledged write)",
                           "durable writes per second")
