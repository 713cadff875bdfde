"""`logtide raft sim`: run the deterministic Raft simulator (same as python -m logtide.engine.raft.sim)."""
from __future__ import annotations

import argparse

from logtide.engine.raft.sim.__main__ import add_arguments


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("raft", help="the Raft core: run the deterministic simulator")
    cmds = p.add_subparsers(dest="raft_command", metavar="SUBCOMMAND")
    cmds.required = True
    s = cmds.add_parser("sim", help="run simulator seeds; a failure prints the command that replays it")
    add_arguments(s)    # one set of options and checks: usage errors then name `logtide raft sim`
    s.set_defaults(func=sim)


def sim(args: argparse.Namespace) -> int:
    from logtide.engine.raft.sim.__main__ import run
    return run(args)
