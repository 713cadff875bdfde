"""Simulator seeds run in two processes: the sweeps of the suite's simulator tests."""
from __future__ import annotations

import functools
import multiprocessing
from typing import Callable


def _call(run: Callable, seed: int, fault_ticks: int):
    return run(seed, fault_ticks=fault_ticks)


def run_seeds(run: Callable, jobs: list[tuple[int, int]]) -> list:
    """run(seed, fault_ticks=ticks) of each (seed, ticks) job, results in job order, in two processes:
    a simulator is pure CPU and the suite's one pytest process leaves the second core idle. The
    workers are spawned, not forked: earlier tests leave threads (gRPC's among them) behind."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        return pool.starmap(functools.partial(_call, run), jobs)
