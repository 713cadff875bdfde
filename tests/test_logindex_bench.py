"""The LogIndex and PostgreSQL WAL benchmarks run end to end at a small scale, and every ratio is computed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_logindex_benchmarks_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    env = dict(os.environ, BENCH_SCALE="0.01")
    pytest_exe = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest_exe), str(ROOT / "bench" / "bench_logindex.py"), str(ROOT / "bench" / "bench_pgwal.py"),
                        "-o", "python_files=bench_*.py", "-o", "testpaths=bench", "-p", "no:cacheprovider",
                        "--import-mode=importlib", "--benchmark-only", "--benchmark-max-time=0.05",
                        "--benchmark-min-rounds=1", f"--benchmark-json={raw}", "-q"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sys.path.insert(0, str(ROOT))
    try:
        from bench import report
        data = json.loads(raw.read_text())
        benchmarks = {b["name"]: b for b in data["benchmarks"]}
        mods = [m for m in report.bench_modules() if m.__name__.split(".")[-1] in ("bench_logindex", "bench_pgwal")]
        rows = report.compute(benchmarks, [r for m in mods for r in m.RATIOS])
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))
    measured = [r for r in rows if r["ratio"] is not None]
    assert len(measured) >= 6 and all(r["ratio"] > 0 for r in measured)
