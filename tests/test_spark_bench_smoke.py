"""bench_spark runs end to end at a small scale (a real Spark session, PostgreSQL WAL and TN), and
every ratio it declares is computed from that run."""
import pytest

from logtide.spark.session import java_available

pytestmark = pytest.mark.skipif(not java_available(), reason="no Java runtime for Spark")


@pytest.mark.timeout(600)
def test_bench_spark_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_spark", timeout=600)
    names = {r["candidate"] for r in rows if r["ratio"] is not None and r["ratio"] > 0}
    assert {"test_replay_spark_pages", "test_replay_spark_shuffle", "test_table_snapshot_spark"} <= names
    # the parallel efficiency is the pages plan's speed-up per core, from the same rounds
    by = {r["name"]: r for r in rows}
    speedup = next(r for n, r in by.items() if n.startswith("partitioned_replay, pages plan"))
    eff = next(r for n, r in by.items() if "parallel efficiency" in n)
    assert eff["ratio"] == pytest.approx(speedup["ratio"] / 2)
    assert benchmarks["test_replay_spark_pages"]["extra_info"]["spark_startup_s"] > 0
