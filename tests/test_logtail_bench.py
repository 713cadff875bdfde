"""The B-tree and logtail benchmarks run end to end at a small scale, and their ratios are computed."""
import pytest


@pytest.mark.timeout(600)
def test_btree_and_logtail_benchmarks_small_scale(bench_run):
    benchmarks, rows = bench_run("bench_btree", "bench_logtail", timeout=600)
    assert len(rows) == 6 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    figs = benchmarks["test_commit_to_visible_latency"]["extra_info"]["figures"]
    assert 0 < figs["commit_to_visible_p50_ms"] <= figs["commit_to_visible_p99_ms"]
    assert benchmarks["test_btree_insert_per_call"]["extra_info"]["figures"]["bytes_per_entry"] <= 24
