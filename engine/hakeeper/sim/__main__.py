"""Run HAKeeper's group in the Raft simulator: `python -m logtide.engine.hakeeper.sim --seed 7`, or
`--seeds 0:500 [--fault-ticks 600] [--jobs 2]`. A failing seed prints the one command that replays
it; the exit status is then 1."""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from logtide.engine.hakeeper.sim.hakeeper_simulation import run_hakeeper_seed
from logtide.engine.raft.sim.__main__ import parse_range


def _run(job: tuple[int, int]):
    seed, fault_ticks = job
    return run_hakeeper_seed(seed, fault_ticks=fault_ticks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m logtide.engine.hakeeper.sim", description=__doc__)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--seed", type=int, help="replay one seed (prints its result)")
    g.add_argument("--seeds", type=parse_range, help="run seeds A:B (B excluded)")
    ap.add_argument("--fault-ticks", type=int, default=150, help="ticks of the fault phase (default 150)")
    ap.add_argument("--jobs", type=int, default=1, help="processes to run seeds in (default 1)")
    args = ap.parse_args(argv)
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    jobs = [(s, args.fault_ticks) for s in seeds]
    failed = 0
    t0 = time.monotonic()
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    try:
        for res in (pool.imap(_run, jobs, chunksize=4) if pool else map(_run, jobs)):
            if args.seed is not None:
                print(res)
            if not res.ok:
                failed += 1
                print(f"seed {res.seed} FAILED: {res.error}\n  replay: {res.replay}", flush=True)
    finally:
        if pool:
            pool.terminate()
    if args.seed is None:
        print(f"{len(jobs)} seeds, {failed} failed, {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
