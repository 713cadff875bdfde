"""bench_replicated_callers runs end to end at a small scale (the meta-service as a 3-replica Raft
group and in one process, a primary on a 3-replica log and on its embedded log), and its ratios
come from that run."""
import pytest


@pytest.mark.timeout(300)
def test_bench_replicated_callers_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_replicated_callers", timeout=300)
    assert {"test_meta_upsert[embedded]", "test_meta_upsert[replicated]", "test_primary_insert_by_log[embedded]",
            "test_primary_insert_by_log[replicated]"} <= set(benchmarks)
    assert all(r["ratio"] is not None and r["ratio"] > 0 for r in rows), rows
    assert len(rows) == 2
