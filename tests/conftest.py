"""Shared fixtures. The suite imports the installed wheel, never the source tree."""
import os
import sys
import sysconfig

import pytest

import logtide

# the suite's own helper modules (tcp_proxy, raft_harness, meta_clock, ...) import by name
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hypothesis_profiles  # noqa: E402,F401 - loads HYPOTHESIS_PROFILE before any test module builds its settings

_SITE = os.path.realpath(sysconfig.get_paths()["purelib"])
if not os.path.realpath(logtide.__file__).startswith(_SITE) and not os.environ.get("LOGTIDE_ALLOW_SOURCE"):
    raise RuntimeError(f"tests must run against the installed logtide, but imported {logtide.__file__}")


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(20261121)


@pytest.fixture
def bench_run(tmp_path):
    """Run bench modules at a small scale in a subprocess; returns (benchmarks by name, ratio rows).

    The rows are the modules' RATIOS computed by bench.report from that run, so a smoke test of a
    benchmark proves the whole path from timing to ratio, not just that the code runs.
    """
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent

    def run(*modules: str, timeout: int = 600, max_time: str | None = "0.05"):
        raw = tmp_path / "raw.json"
        cmd = [str(Path(sys.executable).with_name("pytest")), *(str(root / "bench" / f"{m}.py") for m in modules),
               "-o", "python_files=bench_*.py", "-o", "testpaths=bench", "-p", "no:cacheprovider",
               "--import-mode=importlib", "--benchmark-only", "--benchmark-min-rounds=1",
               f"--benchmark-json={raw}", "-q"]
        if max_time:
            cmd.append(f"--benchmark-max-time={max_time}")
        # under pytest-xdist the worker's PYTEST_XDIST_* variables would make pytest-benchmark disable itself
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        env["BENCH_SCALE"] = "0.01"
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        sys.path.insert(0, str(root))
        try:
            import importlib
            from bench import report
            benchmarks = report.by_name(json.loads(raw.read_text())["benchmarks"])
            ratios = [r for m in modules for r in getattr(importlib.import_module(f"bench.{m}"), "RATIOS", [])]
            rows = report.compute(benchmarks, ratios)
        finally:
            if str(root) in sys.path:  # bench/__init__ takes the source tree off sys.path itself
                sys.path.remove(str(root))
        return benchmarks, rows

    return run


def _is_property_test(item) -> bool:
    """A hypothesis test: @given, or a RuleBasedStateMachine's TestCase."""
    from hypothesis import settings
    from hypothesis.internal.detection import is_hypothesis_test
    if is_hypothesis_test(getattr(item, "obj", None)):
        return True
    cls = getattr(item, "cls", None)
    return cls is not None and isinstance(getattr(cls, "settings", None), settings)


# The suite's longest files, longest first (seconds each under `make test`'s two workers). They
# start first, so the two pytest-xdist workers (run with --no-loadscope-reorder) end close together
# instead of one running a long file alone at the end.
LONG_FIRST = (
    "test_spark_cluster.py",                # ~150
    "test_meta_semantics.py",               # ~130
    "test_raft_sim.py",                     # ~100
    "test_logservice_raft_kill.py",         # ~95
    "test_spark_local.py",                  # ~95
    "test_fault_matrix.py",                 # ~65
    "test_spark_bench_smoke.py",            # ~65
    "test_hakeeper_store_commands.py",      # ~50
    "test_logservice_kill.py",              # ~50
    "test_meta_bench_smoke.py",             # ~45
    "test_btree_stateful.py",               # ~45
    "test_hakeeper_processes.py",           # ~45
    "test_cluster_hakeeper_repair.py",      # ~40
    "test_meta_replica_kill.py",            # ~40
    "test_logindex_ro_follow.py",           # ~40
    "test_replay_raft_kill.py",             # ~35
    "test_wire_floor_bench_smoke.py",       # ~35
    "test_durable_writes_bench_smoke.py",   # ~35
    "test_meta_raft_bench_smoke.py",        # ~35
    "test_cluster_ro_truncation.py",        # ~30
)


def pytest_collection_modifyitems(config, items):
    # `make test-deep` selects these with -m property
    for item in items:
        if not _is_property_test(item):
            continue
        item.add_marker(pytest.mark.property)
        if hypothesis_profiles.FACTOR > 1:   # more examples, more time: the test's timeout scales too
            own = item.get_closest_marker("timeout")
            base = own.args[0] if own and own.args else config.getini("timeout") or 600
            item.add_marker(pytest.mark.timeout(float(base) * hypothesis_profiles.FACTOR), append=False)
    rank = {name: k for k, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))   # stable: files keep their order
