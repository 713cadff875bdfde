"""`logtide spark replay|snapshot|pg-changed-pages`: logtide's Spark jobs from the command line.

Each shows Spark's progress bar, then one summary line per stage: records, pages, seconds,
records/s. `--master` passes through (default local[*]).
"""
from __future__ import annotations

import argparse
import sys
import time

from logtide.arg_types import lsn


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spark", help="partitioned replay, table snapshots and WAL page maps on Spark")
    cmds = p.add_subparsers(dest="spark_command", metavar="ACTION")
    cmds.required = True
    r = cmds.add_parser("replay", help="replay a logtide.replay directory to an LSN, in parallel by page")
    r.add_argument("--dir", required=True, help="the shared directory (log/, pages/, logindex/)")
    r.add_argument("--lsn", required=True, type=int, help="target LSN")
    r.add_argument("--out", required=True, help="output page store directory (must not exist)")
    r.add_argument("--partitions", type=int, default=None, help="page partitions (default: Spark parallelism)")
    r.add_argument("--plan", choices=("auto", "shuffle", "pages"), default="auto")
    r.set_defaults(func=_guarded(run_replay))
    s = cmds.add_parser("snapshot", help="a logtail table at a ts, from checkpoint + objects + log")
    s.add_argument("--tn-dir", required=True, help="the TN's directory (log/, objects/)")
    s.add_argument("--table", required=True)
    s.add_argument("--ts", required=True, type=int)
    s.add_argument("--out", required=True, help="Parquet directory to write")
    s.set_defaults(func=_guarded(run_snapshot))
    c = cmds.add_parser("pg-changed-pages", help="pages changed in a PostgreSQL WAL archive between two LSNs")
    c.add_argument("--pg-wal", required=True, help="pg_wal directory or WAL archive")
    c.add_argument("--from", dest="start", type=lsn, required=True, help="first LSN (X/X or integer), inclusive")
    c.add_argument("--to", dest="end", type=lsn, required=True, help="end LSN (X/X or integer), exclusive")
    c.add_argument("--out", required=True, help="Parquet directory to write")
    c.set_defaults(func=_guarded(run_changed_pages))
    for q in (r, s, c):
        q.add_argument("--master", default=None, help="Spark master URL (default local[*])")
        q.add_argument("--no-progress", action="store_true", help="hide Spark's progress bar")


def _guarded(fn):
    """A logtide error (bad input, no Java) is one line and exit code 2."""
    def run(args: argparse.Namespace) -> int:
        from logtide.errors import LogtideError
        try:
            return fn(args)
        except LogtideError as exc:
            print(f"logtide spark {args.spark_command}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 2
    return run


def _session(args):
    from logtide.spark import get_session
    return get_session(args.master, f"logtide spark {args.spark_command}", progress=not args.no_progress)


def _line(name: str, records: int, pages: int, seconds: float) -> str:
    rate = records / seconds if seconds > 0 else 0.0
    return f"{name}: {records} records, {pages} pages, {seconds:.2f} s, {rate:,.0f} records/s"


def run_replay(args: argparse.Namespace) -> int:
    from logtide.spark import partitioned_replay
    t0 = time.perf_counter()
    spark = _session(args)
    start_s = time.perf_counter() - t0
    res = partitioned_replay(spark, args.dir, args.lsn, args.out, partitions=args.partitions, plan=args.plan)
    print(_line("spark start-up", 0, 0, start_s), flush=True)
    for st in res.stages:
        print(st.line(), flush=True)
    print(f"committed {res.pages} pages at LSN {res.target_lsn} to {res.out_dir} ({res.plan} plan, "
          f"{res.partitions} partitions, {res.applied} page changes applied)", flush=True)
    return 0


def run_snapshot(args: argparse.Namespace) -> int:
    from logtide.spark import table_snapshot
    spark = _session(args)
    t0 = time.perf_counter()
    df = table_snapshot(spark, args.tn_dir, args.table, args.ts)
    df.write.parquet(args.out)
    secs = time.perf_counter() - t0
    rows = spark.read.parquet(args.out).count()
    print(_line(f"snapshot {args.table}@{args.ts}", rows, 0, secs), flush=True)
    print(f"wrote {rows} rows to {args.out}", flush=True)
    return 0


def run_changed_pages(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F
    from logtide.spark import pg_changed_pages
    spark = _session(args)
    t0 = time.perf_counter()
    df = pg_changed_pages(spark, args.pg_wal, args.start, args.end)
    df.write.parquet(args.out)
    secs = time.perf_counter() - t0
    got = spark.read.parquet(args.out).agg(F.count(F.lit(1)).alias("pages"), F.sum("records").alias("refs")).first()
    print(_line("pg-changed-pages", int(got.refs or 0), int(got.pages), secs), flush=True)
    print(f"wrote the block map of [{args.start}, {args.end}) to {args.out}", flush=True)
    return 0
