"""A plot of throughput against client count, for benchmarks parametrized by `clients`."""
from __future__ import annotations

from pathlib import Path


def series(benchmarks: dict, prefix: str) -> list[tuple[int, float]]:
    """(clients, items per second) of every benchmark named `prefix[...]`, by client count."""
    out = []
    for name, b in benchmarks.items():
        if not (name.startswith(prefix + "[") and name[len(prefix) + 1:-1].isdigit()):
            continue                   # other parameters of the same test are not client counts
        info = b.get("extra_info", {})
        if info.get("rate") and info.get("clients"):     # a sustained run: its steady rate
            out.append((int(info["clients"]), float(info["rate"])))
        elif info.get("items") and info.get("clients"):
            out.append((int(info["clients"]), info["items"] / b["stats"]["min"]))
    return sorted(out)


def throughput_plot(benchmarks: dict, outdir, filename: str, lines: dict[str, str], title: str,
                    unit: str) -> list[Path]:
    """One line per {label: benchmark name prefix}; nothing when no line has points."""
    data = {label: series(benchmarks, prefix) for label, prefix in lines.items()}
    if not any(data.values()):
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    fig, ax = plt.subplots(figsize=(7, 4))
    draw_by_clients(ax, data, title, unit)
    out = Path(outdir) / filename
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def draw_by_clients(ax, data: dict[str, list[tuple[int, float]]], title: str, unit: str) -> None:
    """Throughput against client count on `ax`, one line per label."""
    for label, pts in data.items():
        if pts:
            ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 4, 16, 32], ["1", "4", "16", "32"])
    ax.set_xlabel("client threads")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
