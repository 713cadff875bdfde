"""Every benchmark has a name of its own across bench/: the report keys results by test name."""
import ast
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_no_two_bench_modules_share_a_test_name():
    names = Counter()
    for f in sorted((ROOT / "bench").glob("bench_*.py")):
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names[node.name] += 1
    assert names, "no benchmarks found"
    assert [n for n, k in names.items() if k > 1] == []


def test_the_report_refuses_one_name_from_two_modules():
    sys.path.insert(0, str(ROOT))
    try:
        from bench.report import by_name
    finally:
        if str(ROOT) in sys.path:  # bench/__init__ takes the source tree off sys.path itself
            sys.path.remove(str(ROOT))
    a = {"name": "test_x[1]", "fullname": "bench/bench_a.py::test_x[1]"}
    b = {"name": "test_x[1]", "fullname": "bench/bench_b.py::test_x[1]"}
    assert by_name([a]) == {"test_x[1]": a}
    with pytest.raises(ValueError, match="bench_a.py.*bench_b.py"):
        by_name([a, b])


def test_the_report_takes_a_ratio_only_between_benchmarks_of_one_run():
    sys.path.insert(0, str(ROOT))
    try:
        from bench.ratios import Ratio
        from bench.report import compute
    finally:
        if str(ROOT) in sys.path:
            sys.path.remove(str(ROOT))

    def bench(when, rate):
        return {"when": when, "stats": {"min": 1.0}, "extra_info": {"rate": rate}}
    ratio = Ratio("x vs peer", "test_x", ("test_peer_a", "test_peer_b"), 1.5, 24)
    # the faster peer was kept from an earlier run: only the peer measured beside x counts
    rows = compute({"test_x": bench("run2", 300.0), "test_peer_a": bench("run1", 1000.0),
                    "test_peer_b": bench("run2", 100.0)}, [ratio])
    assert rows[0]["baseline"] == "test_peer_b" and rows[0]["ratio"] == 3.0 and rows[0]["met"] is True
    # no peer measured in x's run: no ratio, and the row says why
    rows = compute({"test_x": bench("run2", 300.0), "test_peer_a": bench("run1", 100.0)}, [ratio])
    assert rows[0]["ratio"] is None and rows[0]["met"] is None
    assert rows[0]["other_runs"] == {"candidate": "run2", "baseline": "run1"}
