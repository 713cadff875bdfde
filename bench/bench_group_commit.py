"""Log service group commit: 1, 4, 16 and 32 in-process appenders, fsync="always", 256-byte records.

Appenders wait for durability in Cython (engine/logservice/log_writer.py, _ext/commit_queue.pyx).
Each benchmark reports, over all its rounds, the appends per fdatasync and the process CPU time per
append (time.process_time: every thread of the process, the flusher and the kernel's fsync work
included) and the context switches per append. The issue's goal: 32 appenders >= 10x one appender,
at <= 6 us CPU per append. The same two runs confined to one CPU (logtide.cpu_affinity, both sides)
show what the wake-ups across CPUs cost (bench/bench_wake_cost.py).
"""
from __future__ import annotations

import os
import resource
import time

import pytest

from bench.conftest import cpu_pair_or_skip, scaled
from bench.ratios import Ratio
from bench.client_threads import Threads

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
def test_group_commit_appenders(benchmark, items, tmp_path, clients):
    _appenders(benchmark, items, tmp_path, clients)


@pytest.mark.benchmark(group="logservice-group-commit-one-cpu")
@pytest.mark.parametrize("clients", (1, 32))
def test_group_commit_one_cpu(benchmark, items, tmp_path, clients):
    from logtide.cpu_affinity import confined
    with confined(cpu_pair_or_skip()[0]):   # the service's flusher and the appenders alike
        _appenders(benchmark, items, tmp_path, clients)


def _appenders(benchmark, items, tmp_path, clients: int) -> None:
    from logtide import LogService
    # one appender: 400 appends a round; concurrent ones: 12,800 shared out, so that handing a round
    # to the pool's threads (two 33-party barriers, ~1.5 ms of CPU) is ~1% of the CPU counted per
    # append rather than ~7% as with 3,200
    per = scaled(400, minimum=20) if clients == 1 else max(4, scaled(12800, minimum=128) // clients)
    n = items(per * clients, clients=clients)
    pool = Threads(clients)
    totals = {"cpu": 0.0, "switches": 0, "appends": 0}
    try:
        with LogService.open(tmp_path / "log", fsync="always") as svc:
            def body(t):
                append = svc.append
                for _ in range(per):
                    append(PAYLOAD, replica_id=t)

            def run():
                c0, r0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
                pool.run(body)
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                totals["cpu"] += time.process_time() - c0
                totals["switches"] += (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw)
                totals["appends"] += n

            g0, l0 = svc.stats()["groups"], svc.get_latest_lsn()
            benchmark(run)
            st = svc.stats()
            assert st["latest_lsn"] - l0 == totals["appends"]
            benchmark.extra_info["figures"] = {
                "appends_per_fsync": totals["appends"] / max(1, st["groups"] - g0),
                "cpu_us_per_append": 1e6 * totals["cpu"] / max(1, totals["appends"]),
                "switches_per_append": totals["switches"] / max(1, totals["appends"]),
                "goal_cpu_us_per_append": GOAL_CPU_US,
                "load_avg_1m": os.getloadavg()[0],
            }
    finally:
        pool.close()


def plot(benchmarks: dict, outdir) -> list:
    """Appends/s against appender count, with CPU per append and appends per fsync beside."""
    from pathlib import Path
    runs = {b["extra_info"].get("clients"): b for name, b in benchmarks.items()
            if name.startswith("test_group_commit_appenders") and b.get("extra_info", {}).get("items")}
    if not runs:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = sorted(runs)
    rate = [runs[x]["extra_info"]["items"] / runs[x]["stats"]["min"] for x in xs]
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
