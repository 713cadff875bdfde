"""Ratios between a candidate benchmark and its baseline, measured in the same run.

Each bench_*.py module declares RATIOS: a list of Ratio. A ratio is the baseline's time per item
over the candidate's time per item, both from this run, so a ratio above 1 means logtide is faster.
A baseline may name several benchmarks (the peer in each configuration it was run in): the ratio
is then taken against the fastest of them, the best the other side did. A ratio with `cores`
divides the candidate's rate by its core count: the parallel efficiency of a speed-up, taken from
the same run as the speed-up itself.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    name: str          # what the ratio says, e.g. "Bloom4K `in` vs rbloom `in`"
    candidate: str     # benchmark test name (function name)
    baseline: str | tuple[str, ...]  # benchmark test name of the baseline (a tuple: the fastest of them)
    target: float | None  # the ratio the issue asks for (None: a comparison the issue sets no goal for)
    issue: int         # the issue that names the target
    cores: int = 1     # the candidate ran on this many cores: its rate per core is compared
