"""Log service group commit: 1, 4, 16 and 32 in-process appenders, fsync="always", 256-byte records.

Appenders wait for durability in Cython (engine/logservice/log_writer.py, _ext/commit_queue.pyx).
Each count runs sustained for 10 s after a warm-up (bench/sustained.py), and reports the appends
per fdatasync, the process CPU time per append (every thread of the process, the flusher and the
kernel's fsync work included) and the context switches per append. The issue's goal: 32 appenders
>= 10x one appender, at <= 6 us CPU per append. The same two runs confined to one CPU (logtide.cpu_affinity, both sides)
show what the wake-ups across CPUs cost (bench/bench_wake_cost.py).
"""
from __future__ import annotations

import os

import pytest

from bench.conftest import cpu_pair_or_skip
from bench.ratios import Ratio
from bench.sustained import WARMUP_SECONDS, run_sustained, sustained_benchmark

RATIOS = [
    Ratio("log group commit: 32 appenders vs 1 appender, fsync=always, 256 B (Cython waiters)",
          "test_group_commit_appenders[32]", "test_group_commit_appenders[1]", 10.0, 13),
    # against the faster single appender (confined or not: one appender gains nothing from it)
    Ratio("log group commit confined to one CPU: 32 appenders vs the faster 1 appender (one CPU or two), "
          "fsync=always, 256 B",
          "test_group_commit_one_cpu[32]", ("test_group_commit_one_cpu[1]", "test_group_commit_appenders[1]"),
          10.0, 27),
]

CLIENTS = (1, 4, 16, 32)
GOAL_CPU_US = 6.0          # issue 27: CPU per append at 32 appenders
PAYLOAD = b"\xa5" * 256


@pytest.mark.benchmark(group="logservice-group-commit")
@pytest.mark.parametrize("clients", CLIENTS)
def test_group_commit_appenders(benchmark, tmp_path, clients):
    _appenders(benchmark, tmp_path, clients)


@pytest.mark.benchmark(group="logservice-group-commit-one-cpu")
@pytest.mark.parametrize("clients", (1, 32))
def test_group_commit_one_cpu(benchmark, tmp_path, clients):
    from logtide.cpu_affinity import confined
    with confined(cpu_pair_or_skip()[0]):   # the service's flusher and the appenders alike
        _appenders(benchmark, tmp_path, clients)


def _appenders(benchmark, tmp_path, clients: int) -> None:
    """`clients` threads appending to one embedded service, sustained (bench/sustained.py): its steady
    state, without the start and end of short rounds (a release of every appender at once, and
    a tail of small groups as they finish) in the CPU counted per append."""
    from logtide import LogService
    with LogService.open(tmp_path / "log", fsync="always") as svc:
        op = lambda t: svc.append(PAYLOAD, replica_id=t)   # noqa: E731
        run_sustained(clients, WARMUP_SECONDS, op)
        g0, l0 = svc.stats()["groups"], svc.get_latest_lsn()
        run = sustained_benchmark(benchmark, clients, op, warmup=0)
        st = svc.stats()
        assert st["latest_lsn"] - l0 == run.ops
        benchmark.extra_info["figures"] = {
            "appends_per_fsync": run.ops / max(1, st["groups"] - g0),
            "cpu_us_per_append": 1e6 * run.cpu_s / max(1, run.ops),
            "switches_per_append": run.switches / max(1, run.ops),
            "goal_cpu_us_per_append": GOAL_CPU_US,
            "load_avg_1m": os.getloadavg()[0],
        }


def plot(benchmarks: dict, outdir) -> list:
    """Appends/s against appender count, with CPU per append and appends per fsync beside."""
    from pathlib import Path
    runs = {b["extra_info"].get("clients"): b for name, b in benchmarks.items()
            if name.startswith("test_group_commit_appenders") and b.get("extra_info", {}).get("rate")}
    if not runs:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = sorted(runs)
    rate = [runs[x]["extra_info"]["rate"] for x in xs]
    figs = [runs[x]["extra_info"].get("figures", {}) for x in xs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(xs, rate, "o-", label="appends/s (fsync=always)")
    ax1.plot(xs, [rate[0] * x for x in xs], ":", color="grey", label="one appender x clients")
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(xs, [str(x) for x in xs])
    ax1.set_xlabel("appender threads")
    ax1.set_ylabel("appends/s")
    ax1.set_title("Log service group commit (in-process, 256 B)")
    ax1.legend()
    ax2.plot(xs, [f.get("cpu_us_per_append", 0) for f in figs], "o-", color="tab:red", label="CPU us per append")
    ax2.axhline(GOAL_CPU_US, ls="--", color="tab:red", lw=0.8, label=f"goal: {GOAL_CPU_US:g} us")
    ax2.plot(xs, [f.get("appends_per_fsync", 0) for f in figs], "s-", color="tab:green", label="appends per fsync")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xticks(xs, [str(x) for x in xs])
    ax2.set_xlabel("appender threads")
    ax2.legend()
    out = Path(outdir) / "logservice_group_commit.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]
