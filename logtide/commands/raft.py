"""`logtide raft sim`: run the deterministic Raft simulator (same as python -m logtide.engine.raft.sim)."""
from __future__ import annotations

import argparse

from logtide.engine.raft.sim.cluster import BUGS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("raft", help="the Raft core: run the deterministic simulator")
    cmds = p.add_subparsers(dest="raft_command", metavar="SUBCOMMAND")
    cmds.required = True
    s = cmds.add_parser("sim", help="run simulator seeds; a failure prints the command that replays it")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--seed", help="replay one seed")
    g.add_argument("--seeds", help="run seeds A:B (B excluded)")
    g.add_argument("--soak", metavar="MINUTES", help="random seeds and fault lengths until the time is up")
    s.add_argument("--fault-ticks", default="150")
    s.add_argument("--bug", choices=sorted(BUGS))
    s.add_argument("--jobs", default="1", help="processes to run seeds in")
    s.add_argument("--stop-on-failure", action="store_true")
    s.set_defaults(func=sim)


def sim(args: argparse.Namespace) -> int:
    from logtide.engine.raft.sim.__main__ import main
    if args.seed is not None:
        argv = ["--seed", args.seed]
    elif args.seeds is not None:
        argv = ["--seeds", args.seeds]
    else:
        argv = ["--soak", args.soak]
    argv += ["--fault-ticks", args.fault_ticks, "--jobs", args.jobs]
    if args.bug:
        argv += ["--bug", args.bug]
    if args.stop_on_failure:
        argv.append("--stop-on-failure")
    return main(argv)
