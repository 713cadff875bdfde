"""Run simulator seeds: `python -m logtide.engine.raft.sim --seed 7` or `--seeds 0:2000`.

A failing seed prints the one-line command that replays it exactly; the exit status is 1.
"""
from __future__ import annotations

import argparse
import sys
import time

from logtide.engine.raft.sim.cluster import BUGS, run_seed


def parse_range(text: str) -> range:
    a, _, b = text.partition(":")
    return range(int(a), int(b)) if b else range(int(a), int(a) + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m logtide.engine.raft.sim", description=__doc__)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--seed", type=int, help="replay one seed (prints its result)")
    g.add_argument("--seeds", type=parse_range, help="run seeds A:B (B excluded)")
    ap.add_argument("--fault-ticks", type=int, default=150, help="ticks of the fault phase (default 150)")
    ap.add_argument("--bug", choices=sorted(BUGS), help="drive the core wrongly, to see the checker catch it")
    ap.add_argument("--stop-on-failure", action="store_true")
    args = ap.parse_args(argv)
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    failed = 0
    t0 = time.monotonic()
    for k, seed in enumerate(seeds):
        res = run_seed(seed, fault_ticks=args.fault_ticks, bug=args.bug)
        if args.seed is not None:
            print(res)
        if not res.ok:
            failed += 1
            print(f"seed {seed} FAILED: {res.error}\n  replay: {res.replay}", flush=True)
            if args.stop_on_failure:
                break
        if args.seeds is not None and (k + 1) % 250 == 0:
            print(f"  {k + 1}/{len(seeds)} seeds, {failed} failed, {time.monotonic() - t0:.1f}s", flush=True)
    if args.seeds is not None:
        print(f"{len(seeds)} seeds, {failed} failed, {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
