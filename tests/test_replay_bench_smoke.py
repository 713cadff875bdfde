"""bench_replay runs end to end at a small scale, and every ratio it declares is computed from the run."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_bench_replay_small_scale(bench_run, tmp_path):
    benchmarks, rows = bench_run("bench_replay", timeout=600)
    assert rows and all(r["ratio"] is not None and r["ratio"] > 0 for r in rows)
    sys.path.insert(0, str(ROOT))
    try:
        from bench import bench_replay
        plots = bench_replay.plot(benchmarks, tmp_path)
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))
    assert plots and all(Path(x).exists() for x in plots)
