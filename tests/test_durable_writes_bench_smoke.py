"""bench/bench_durable_writes.py runs end to end at a small scale: PostgreSQL started by the
benchmark, sustained runs of the TN, the primary and pgbench at every client count, both ratios
computed from the steady rates, and the plot."""
import os

import pytest

from logtide.logindex.pgcluster import pg_available


@pytest.mark.timeout(400)
def test_durable_writes_benchmarks_small_scale(bench_run, tmp_path):
    reason = pg_available()
    if reason:
        pytest.skip(f"PostgreSQL peer not run: {reason}")
    benchmarks, rows = bench_run("bench_durable_writes", timeout=380)
    # the two ratios the issue sets a goal for (16 clients), the same with each side confined to one
    # CPU, and the other client counts beside them
    assert [r["target"] for r in rows[:4]] == [1.5] * 4, rows
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:  # the one-CPU runs are skipped: there is no other placement
        rows = rows[:2] + rows[4:]
    assert len(rows) == (10 if len(cpus) > 1 else 8), rows
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in rows), rows
    if len(cpus) > 1:
        # a one-CPU ratio is taken against PostgreSQL's faster placement
        pg = {n: benchmarks[n]["extra_info"]["rate"] for n in ("test_pg_insert_txn[16]", "test_pg_insert_txn_one_cpu")}
        assert rows[2]["baseline"] == max(pg, key=pg.get), (rows[2], pg)
        assert benchmarks["test_pg_insert_txn_one_cpu"]["extra_info"]["cpus"] == cpus[:1]
    for test in ("test_tn_insert_txn", "test_primary_insert", "test_pg_insert_txn"):
        for clients in (1, 4, 16, 32):
            info = benchmarks[f"{test}[{clients}]"]["extra_info"]
            assert info["items"] > 0 and info["rate"] > 0
            # one sample a second of the sustained run (pgbench -P 1 on the peer's side)
            assert len(info["per_second"]) >= 1 and sum(info["per_second"]) > 0, info
    assert benchmarks["test_tn_insert_txn[16]"]["extra_info"]["figures"]["commits_per_fsync"] >= 1
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        from bench import bench_durable_writes
        out = bench_durable_writes.plot(benchmarks, tmp_path)
    finally:
        sys.path.pop(0)
    assert out and out[0].exists() and out[0].stat().st_size > 0
