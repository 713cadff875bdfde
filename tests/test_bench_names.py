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
