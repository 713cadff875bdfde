"""bench_replay runs end to end at a small scale, and every ratio it declares is computed from the run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_bench_replay_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    env = dict(os.environ, BENCH_SCALE="0.01")
    pytest_bin = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest_bin), str(ROOT / "bench" / "bench_replay.py"), "-o", "python_files=bench_*.py",
                        "-o", "testpaths=bench", "-p", "no:cacheprovider", "--import-mode=importlib",
                        "--benchmark-only", "--benchmark-max-time=0.05", "--benchmark-min-rounds=1",
                        f"--benchmark-json={raw}", "-q"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sys.path.insert(0, str(ROOT))
    try:
        from bench import report
        from bench import bench_replay
        benchmarks = {b["name"]: b for b in json.loads(raw.read_text())["benchmarks"]}
        rows = report.compute(benchmarks, bench_replay.RATIOS)
        if hasattr(bench_replay, "plot"):
            assert all(Path(x).exists() for x in bench_replay.plot(benchmarks, tmp_path))
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))
    assert rows and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
