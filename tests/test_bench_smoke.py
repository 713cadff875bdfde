"""The benchmark suite runs end to end at a small scale and its report computes every ratio."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_report_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    env = dict(os.environ, BENCH_SCALE="0.01")
    pytest = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest), str(ROOT / "bench"), "-o", "python_files=bench_*.py", "-o", "testpaths=bench",
                        "-p", "no:cacheprovider", "--import-mode=importlib", "--benchmark-only",
                        "--benchmark-max-time=0.05", "--benchmark-min-rounds=1", f"--benchmark-json={raw}", "-q",
                        "-k", "bloom or murmur"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # the report, on that run: every ratio of the selected modules is computed from real timings
    sys.path.insert(0, str(ROOT))
    try:
        from bench import report
        data = json.loads(raw.read_text())
        benchmarks = {b["name"]: b for b in data["benchmarks"]}
        mods = [m for m in report.bench_modules() if m.__name__.split(".")[-1] in ("bench_bloom4k", "bench_murmur3")]
        rows = report.compute(benchmarks, [r for m in mods for r in m.RATIOS])
    finally:
        if str(ROOT) in sys.path:  # bench/__init__ takes the source tree off sys.path itself
            sys.path.remove(str(ROOT))
    assert rows and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
