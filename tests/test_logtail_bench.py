"""The B-tree and logtail benchmarks run end to end at a small scale, and their ratios are computed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_btree_and_logtail_benchmarks_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    env = dict(os.environ, BENCH_SCALE="0.01")
    pytest_exe = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest_exe), str(ROOT / "bench" / "bench_btree.py"), str(ROOT / "bench" / "bench_logtail.py"),
                        "-o", "python_files=bench_*.py", "-o", "testpaths=bench", "-p", "no:cacheprovider",
                        "--import-mode=importlib", "--benchmark-only", "--benchmark-max-time=0.05",
                        "--benchmark-min-rounds=1", f"--benchmark-json={raw}", "-q"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads(raw.read_text())
    benchmarks = {b["name"]: b for b in data["benchmarks"]}
    sys.path.insert(0, str(ROOT))
    try:
        from bench import bench_btree, bench_logtail, report
        rows = report.compute(benchmarks, bench_btree.RATIOS + bench_logtail.RATIOS)
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))
    assert len(rows) == 6 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    figs = benchmarks["test_commit_to_visible_latency"]["extra_info"]["figures"]
    assert 0 < figs["commit_to_visible_p50_ms"] <= figs["commit_to_visible_p99_ms"]
    assert benchmarks["test_btree_insert_per_call"]["extra_info"]["figures"]["bytes_per_entry"] <= 24
