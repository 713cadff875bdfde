"""bench/bench_logservice.py runs end to end at a small scale and both of its ratios are computed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_logservice_benchmarks_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    pytest_exe = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest_exe), str(ROOT / "bench" / "bench_logservice.py"), "-o", "python_files=bench_*.py",
                        "-o", "testpaths=bench", "-p", "no:cacheprovider", "--import-mode=importlib",
                        "--benchmark-only", "--benchmark-max-time=0.05", "--benchmark-min-rounds=1",
                        f"--benchmark-json={raw}", "-q"],
                       cwd=tmp_path, env=dict(os.environ, BENCH_SCALE="0.01"), capture_output=True, text=True,
                       timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sys.path.insert(0, str(ROOT))
    try:
        from bench import bench_logservice, report
        benchmarks = {b["name"]: b for b in json.loads(raw.read_text())["benchmarks"]}
        rows = report.compute(benchmarks, bench_logservice.RATIOS)
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))
    assert len(rows) == 2 and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    figures = benchmarks["test_read_batch_4k_inproc"]["extra_info"]["figures"]
    assert figures["MB_per_s"] > 0 and benchmarks["test_append_32_threads_fsync_always"]["extra_info"]["figures"]
