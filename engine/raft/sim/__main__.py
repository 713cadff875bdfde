"""Run simulator seeds: `python -m logtide.engine.raft.sim --seed 7`, `--seeds 0:2000`, or
`--soak 30` (random seeds and fault lengths for 30 minutes).

A failing seed prints the one-line command that replays it exactly; the exit status is 1.
`--jobs N` runs seeds in N processes (the results and their order do not change).
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time

from logtide.arg_types import positive_float, positive_int
from logtide.engine.raft.sim.cluster import BUGS, run_seed

SOAK_FAULT_TICKS = (150, 600, 3000)  # the fault phases a soak draws from


def parse_range(text: str) -> range:
    """Seeds A:B (B excluded) or one seed A; argparse's error for anything else, an empty range too."""
    a, sep, b = text.partition(":")
    try:
        seeds = range(int(a), int(b)) if sep else range(int(a), int(a) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes A:B (integers, B excluded) or A, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"A:B needs A < B (B is excluded), got {text!r}")
    return seeds


def _run(job: tuple[int, int, str | None]):
    seed, fault_ticks, bug = job
    return run_seed(seed, fault_ticks=fault_ticks, bug=bug)


def _jobs(args) -> tuple[list | None, float | None]:
    """The (seed, fault ticks, bug) jobs to run, or a deadline for a soak."""
    if args.soak is not None:
        return None, time.monotonic() + args.soak * 60
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    return [(s, args.fault_ticks, args.bug) for s in seeds], None


def _soak_jobs(deadline: float, bug: str | None, rng: random.Random):
    while time.monotonic() < deadline:
        yield rng.randrange(1 << 40), rng.choice(SOAK_FAULT_TICKS), bug


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The simulator's options, on its own parser or on `logtide raft sim`'s."""
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--seed", type=int, help="replay one seed (prints its result)")
    g.add_argument("--seeds", type=parse_range, help="run seeds A:B (B excluded)")
    g.add_argument("--soak", type=positive_float, metavar="MINUTES",
                   help="run random seeds with fault phases of 150, 600 or 3000 ticks until the time is up")
    ap.add_argument("--fault-ticks", type=positive_int, default=150, help="ticks of the fault phase (default 150)")
    ap.add_argument("--bug", choices=sorted(BUGS), help="drive the core wrongly, to see the checker catch it")
    ap.add_argument("--jobs", type=positive_int, default=1, help="processes to run seeds in (default 1)")
    ap.add_argument("--stop-on-failure", action="store_true")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m logtide.engine.raft.sim", description=__doc__)
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the seeds (or the soak) `args` name; 1 if any failed, else 0."""
    jobs, deadline = _jobs(args)
    if deadline is not None:
        start = random.SystemRandom().randrange(1 << 30)
        print(f"soak: {args.soak:g} minutes of random seeds (generator seed {start})", flush=True)
        jobs = _soak_jobs(deadline, args.bug, random.Random(start))
    total = f"/{len(jobs)}" if isinstance(jobs, list) else ""
    failed = done = 0
    t0 = time.monotonic()
    pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else None
    try:
        results = pool.imap(_run, jobs, chunksize=4) if pool else map(_run, jobs)
        for res in results:
            done += 1
            if args.seed is not None:
                print(res)
            if not res.ok:
                failed += 1
                print(f"seed {res.seed} FAILED: {res.error}\n  replay: {res.replay}", flush=True)
                if args.stop_on_failure:
                    break
            if deadline is not None and time.monotonic() >= deadline:
                break  # a pool's feeder queues seeds ahead: stop on the clock, not on the queue
            if args.seed is None and done % 250 == 0:
                print(f"  {done}{total} seeds, {failed} failed, {time.monotonic() - t0:.1f}s", flush=True)
    finally:
        if pool:
            pool.terminate()
    if args.seed is None:
        print(f"{done} seeds, {failed} failed, {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
