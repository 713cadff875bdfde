"""`logtide demo`: run every demo stage in order on a scratch directory."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job on embedded defaults and print its figures")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    p.add_argument("--only", action="append", default=None, help="run only the named stage(s)")
    p.add_argument("--list", action="store_true", help="list the stages and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from logtide.demo import run_stages, stages
    if args.list:
        for stage in stages():
            print(f"{stage.NAME:<12} {stage.TITLE}")
        return 0
    return run_stages(args.dir, args.only)
