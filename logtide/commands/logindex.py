"""`logtide logindex build|query`: index a PostgreSQL WAL by page, then ask which LSNs touched a page."""
from __future__ import annotations

import argparse
import os
import sys
import time

from logtide.arg_types import lsn


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logindex", help="build or query a LogIndex (page -> LSNs) over PostgreSQL WAL")
    cmds = p.add_subparsers(dest="logindex_command", metavar="ACTION")
    cmds.required = True
    b = cmds.add_parser("build", help="index every block reference of a pg_wal directory")
    b.add_argument("--pg-wal", required=True, help="directory of PostgreSQL 15 WAL segment files")
    b.add_argument("--out", required=True, help="LogIndex directory to create or extend")
    b.add_argument("--from", dest="start", type=lsn, default=None, help="skip records before this LSN (X/X)")
    b.add_argument("--strict", action="store_true", help="fail on a damaged record instead of ending there")
    b.set_defaults(func=build)
    q = cmds.add_parser("query", help="LSNs that touched a page, or pages changed in an LSN range")
    q.add_argument("--dir", required=True, help="LogIndex directory")
    q.add_argument("--tag", default=None, help="page as spc/db/rel/fork/block")
    q.add_argument("--from", dest="start", type=lsn, default=None, help="first LSN (X/X or integer), inclusive")
    q.add_argument("--to", dest="end", type=lsn, default=None, help="last LSN (X/X or integer), inclusive")
    q.add_argument("--stats", action="store_true", help="print lookup statistics")
    q.set_defaults(func=query)


def build(args: argparse.Namespace) -> int:
    from logtide import LogIndex
    from logtide.logindex.pgwal import PgWalReader, format_lsn

    start = args.start if args.start is not None else 0
    reader = PgWalReader(args.pg_wal, strict=args.strict)
    t0 = time.perf_counter()
    rows = 0
    with LogIndex.open(args.out) as li:
        skipped_from = li.replay_needed_from()
        for b in reader.batches(start):
            li.insert_many(b.tags, b.lsn)
            rows += len(b.lsn)
            print(f"  segment {reader.segments_read}/{len(reader.segments)}: {reader.records} records, "
                  f"{rows} block refs, up to {format_lsn(reader.end_lsn)}", flush=True)
        li.flush(include_active=True)
        meta = li.meta
    dt = time.perf_counter() - t0
    print(f"indexed {reader.records} records / {rows} block refs in {dt:.2f}s "
          f"({rows / dt if dt else 0:,.0f} refs/s) into tables {meta.min_table_id}..{meta.max_table_id}")
    if skipped_from:
        print(f"(LSNs up to {format_lsn(skipped_from)} were already indexed and were skipped)")
    print(f"WAL ends at {format_lsn(reader.end_lsn)}: {reader.end_reason}")
    return 0


def query(args: argparse.Namespace) -> int:
    from logtide import LogIndex, PageTag
    from logtide.logindex import MAX_LSN
    from logtide.logindex.pgwal import format_lsn

    from logtide.errors import InvalidArgument
    from logtide.logindex.table_format import META_NAME

    lo = args.start if args.start is not None else 0
    hi = args.end if args.end is not None else MAX_LSN
    tag = PageTag.parse(args.tag) if args.tag else None
    # a directory without the meta file would answer "0 pages changed", whatever it holds
    if os.path.isdir(args.dir) and not os.path.exists(os.path.join(args.dir, META_NAME)):
        raise InvalidArgument(f"{args.dir} holds no LogIndex (no {META_NAME})")
    li = LogIndex.open(args.dir, mode="ro")
    if tag is not None:
        lsns = li.lsns(tag, lo, hi)
        print(f"page {tag}: {len(lsns)} LSNs")
        for l in lsns.tolist():
            print(format_lsn(l))
    else:
        # pages changed in [lo, hi] (e.g. for an incremental backup), each once, in first-change order
        seen = {}
        for lsns, tags in li.iter_lsn_arrays(lo):
            if int(lsns[0]) > hi:
                break
            keep = lsns <= hi
            for l, t in zip(lsns[keep].tolist(), map(tuple, tags[keep].tolist())):
                seen.setdefault(t, l)
        print(f"{len(seen)} pages changed in [{format_lsn(lo)}, {format_lsn(hi) if hi != MAX_LSN else 'end'}]")
        for t, l in seen.items():
            print(f"{'/'.join(map(str, t))}\tfirst {format_lsn(l)}")
    if args.stats:
        st = li.stats()
        print(f"tables read {st['tables_read']}, skipped by bloom {st['tables_skipped_bloom']}, "
              f"skipped by LSN range {st['tables_skipped_range']}, bloom skip rate {st['bloom_skip_rate']:.3f}",
              file=sys.stderr)
    li.close()
    return 0
