"""bench/bench_meta.py runs end to end at a tiny scale (etcd's side runs too when it is installed)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_bench_meta_small_scale(tmp_path):
    raw = tmp_path / "raw.json"
    env = dict(os.environ, BENCH_SCALE="0.01")
    pytest_bin = Path(sys.executable).with_name("pytest")
    p = subprocess.run([str(pytest_bin), str(ROOT / "bench" / "bench_meta.py"), "-o", "python_files=bench_*.py",
                        "-o", "testpaths=bench", "-p", "no:cacheprovider", "--import-mode=importlib",
                        "--benchmark-only", "--benchmark-min-rounds=1", f"--benchmark-json={raw}", "-q"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    names = {b["name"] for b in json.loads(raw.read_text())["benchmarks"]}
    assert {"test_meta_embedded_upsert", "test_meta_embedded_get", "test_meta_grpc_upsert", "test_meta_grpc_get",
            "test_meta_grpc_txn"} <= names
