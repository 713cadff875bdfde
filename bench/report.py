"""Run the benchmark suite and report each ratio beside its target.

    python -m bench.report [-k EXPR] [--scale 0.1] [--from-json FILE]

Writes bench/results/latest.json (every benchmark, every ratio) and bench/results/ratios.png.
With -k, the benchmarks run now replace their earlier entries in latest.json and the others are
kept (each entry says when it ran), so one module can be re-measured without rerunning the suite.
Modules may add plots with a `plot(benchmarks: dict, outdir: Path) -> list[Path]` hook.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
from pathlib import Path

import bench
from bench.ratios import Ratio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def bench_modules():
    return [importlib.import_module(f"bench.{m.name}") for m in pkgutil.iter_modules(bench.__path__)
            if m.name.startswith("bench_")]


def run_pytest(raw: Path, select: str | None, scale: float) -> int:
    pytest = Path(sys.executable).with_name("pytest")
    cmd = [str(pytest) if pytest.exists() else sys.executable, *([] if pytest.exists() else ["-m", "pytest"]),
           str(HERE), "-o", "python_files=bench_*.py", "-o", "testpaths=bench", "-p", "no:cacheprovider",
           "--import-mode=importlib", "--benchmark-only", "--benchmark-min-rounds=5",
           "--benchmark-max-time=2", "--benchmark-warmup=on",
           "--benchmark-sort=name", "--benchmark-columns=min,median,mean,rounds", f"--benchmark-json={raw}"]
    if select:
        cmd += ["-k", select]
    env = dict(os.environ, BENCH_SCALE=str(scale), PYTHONPATH=str(HERE.parent))
    print("running:", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=HERE.parent, env=env)


def by_name(raw_benchmarks: list[dict]) -> dict[str, dict]:
    """pytest-benchmark's entries by test name: the ratios, plots and latest.json key on it, so one
    name measured by two modules is refused rather than letting one silently replace the other."""
    out: dict[str, dict] = {}
    for b in raw_benchmarks:
        seen = out.get(b["name"])
        if seen is not None and seen.get("fullname") != b.get("fullname"):
            raise ValueError(f"benchmark name {b['name']!r} is used by both {seen.get('fullname')} and "
                             f"{b.get('fullname')}: rename one")
        out[b["name"]] = b
    return out


def per_item(b: dict) -> float | None:
    rate = b.get("extra_info", {}).get("rate")
    if rate:   # a sustained run's own steady rate (bench/sustained.py, pgbench -T): its round's wall
        return 1 / rate   # time also holds thread or process start, which the rules keep out
    items = b.get("extra_info", {}).get("items")
    if not items:
        return None
    return b["stats"]["min"] / items


def compute(benchmarks: dict[str, dict], ratios: list[Ratio]) -> list[dict]:
    """One row per ratio. A ratio is taken only between benchmarks of one run: latest.json keeps
    entries of earlier runs (report -k), and a baseline kept from another run (a peer that was
    skipped this time, say) would compare two machines' or two loads' figures as if side by side."""
    rows = []
    for r in ratios:
        c = benchmarks.get(r.candidate)
        # several baselines: the fastest of those measured in the candidate's run
        names = (r.baseline,) if isinstance(r.baseline, str) else r.baseline
        measured = [n for n in names if benchmarks.get(n) and per_item(benchmarks[n])]
        same_run = [n for n in measured if c is not None and benchmarks[n].get("when") == c.get("when")]
        best = min(same_run, key=lambda n: per_item(benchmarks[n]), default=None)
        b = benchmarks.get(best) if best else None
        row = {"name": r.name, "issue": r.issue, "target": r.target, "candidate": r.candidate,
               "baseline": best or names[0], "ratio": None, "met": None}
        if c and per_item(c) and measured and not same_run:
            row["other_runs"] = {"candidate": c.get("when"), "baseline": benchmarks[measured[0]].get("when")}
        if c and b and per_item(c) and per_item(b):
            row["ratio"] = per_item(b) / per_item(c) / r.cores
            row["met"] = None if r.target is None else row["ratio"] >= r.target
            row["candidate_items_per_s"] = 1 / per_item(c) / r.cores
            row["baseline_items_per_s"] = 1 / per_item(b)
        rows.append(row)
    return rows


def print_report(rows: list[dict], benchmarks: dict[str, dict]) -> None:
    print("\n== ratios (baseline time per item / logtide time per item, min of rounds) ==")
    for row in rows:
        if row["ratio"] is None:
            runs = row.get("other_runs")
            why = (f"its sides ran in different runs (candidate {runs['candidate']}, baseline {runs['baseline']})"
                   if runs else "not measured in this run")
            print(f"  [ -- ] {row['name']}: {why}")
            continue
        flag = "info" if row["met"] is None else " ok " if row["met"] else "MISS"
        goal = "no target" if row["target"] is None else f"target >= {row['target']:g}x"
        print(f"  [{flag}] {row['name']}: {row['ratio']:.2f}x  ({goal}, issue #{row['issue']})"
              f"  [{row['candidate_items_per_s']:,.0f} vs {row['baseline_items_per_s']:,.0f} items/s]")
    figs = {n: b["extra_info"]["figures"] for n, b in benchmarks.items() if b.get("extra_info", {}).get("figures")}
    if figs:
        print("\n== figures ==")
        for name, f in sorted(figs.items()):
            print(f"  {name}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in f.items()))


def plot_ratios(rows: list[dict], out: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)")
        return None
    rows = [r for r in rows if r["ratio"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 1.5))
    y = range(len(rows))
    ax.barh(y, [r["ratio"] for r in rows],
            color=["tab:gray" if r["met"] is None else "tab:green" if r["met"] else "tab:red" for r in rows])
    goals = [(r["target"], i) for i, r in enumerate(rows) if r["target"] is not None]
    ax.scatter([t for t, _ in goals], [i for _, i in goals], marker="|", s=400, color="black", label="target",
               zorder=3)
    ax.set_yticks(list(y), [r["name"] for r in rows], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up over baseline (log scale)")
    ax.legend(loc="lower right")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="select", help="only benchmarks matching this pytest -k expression")
    ap.add_argument("--scale", type=float, default=float(os.environ.get("BENCH_SCALE", "1")),
                    help="shrink every benchmark's work (1 = full size)")
    ap.add_argument("--from-json", type=Path, help="report on an earlier pytest-benchmark JSON instead of running")
    args = ap.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    status = 0
    if args.from_json:
        raw = args.from_json
    else:
        raw = RESULTS / f"raw-{time.strftime('%Y%m%d-%H%M%S')}.json"
        rc = run_pytest(raw, args.select, args.scale)
        if not raw.exists():
            print(f"benchmark run failed (pytest exit {rc})", file=sys.stderr)
            return rc or 1
        if rc not in (0, 5):  # some benchmarks failed: report the ones that ran, then fail
            print(f"some benchmarks failed (pytest exit {rc}); reporting the rest", file=sys.stderr)
            status = rc
    data = json.loads(raw.read_text())
    when = data.get("datetime")
    benchmarks = {n: dict(b, when=when) for n, b in by_name(data["benchmarks"]).items()}
    latest = RESULTS / "latest.json"
    modules = bench_modules()
    if args.select and latest.exists():
        earlier = json.loads(latest.read_text())
        # entries of benchmarks that no longer exist (renamed or removed) are dropped, not reported
        current = {n for m in modules for n in dir(m) if n.startswith("test_")}
        benchmarks = {**{n: dict(b, when=b.get("when") or earlier.get("when"))
                         for n, b in earlier.get("benchmarks", {}).items() if n.split("[")[0] in current},
                      **benchmarks}
    ratios = [r for m in modules for r in getattr(m, "RATIOS", [])]
    rows = compute(benchmarks, ratios)
    print_report(rows, benchmarks)
    plots = [p for p in [plot_ratios(rows, RESULTS / "ratios.png")] if p]
    for m in modules:
        if hasattr(m, "plot"):
            plots += m.plot(benchmarks, RESULTS) or []
    summary = {
        "when": when, "selected": args.select, "machine": data.get("machine_info", {}).get("cpu", {}).get("brand_raw"),
        "scale": args.scale, "ratios": rows,
        "benchmarks": {n: {"when": b.get("when"),
                           "stats": {k: b["stats"][k] for k in ("min", "median", "mean", "stddev", "rounds")},
                           "extra_info": b.get("extra_info", {})} for n, b in sorted(benchmarks.items())},
        "plots": [str(p.relative_to(HERE.parent)) for p in plots],
    }
    latest.write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {RESULTS / 'latest.json'}" + "".join(f"\nwrote {p}" for p in plots))
    return status


if __name__ == "__main__":
    sys.exit(main())
