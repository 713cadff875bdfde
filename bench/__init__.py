"""The benchmark suite (pytest-benchmark). Run `make bench` or `python -m bench.report`.

Benchmarks measure the installed wheel, so the source tree is taken off sys.path here: the
folder `logtide/` beside this one is only the front door, without the compiled parts.
"""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
# ... and from the PYTHONPATH that `bench.report` sets, so servers the benchmarks start run the wheel too
if os.environ.get("PYTHONPATH"):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in os.environ["PYTHONPATH"].split(os.pathsep) if p and os.path.abspath(p) != _ROOT)
