"""`logtide logtail tn|cn`: run a transaction node or a compute node as its own process."""
from __future__ import annotations

import argparse
import json
import time

from logtide.arg_types import non_negative_float, non_negative_int, positive_float
from logtide.stop_signal import stop_event


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logtail", help="logtail: a transaction node (tn) or a compute node (cn), each a process")
    roles = p.add_subparsers(dest="role", required=True)
    tn = roles.add_parser("tn", help="serve a TN over DIR (log service in DIR/log, objects in DIR/objects)")
    tn.add_argument("dir")
    tn.add_argument("--address", default="127.0.0.1:0", help="host:port to listen on (port 0: any)")
    tn.add_argument("--table", default="t", help="table served and written by the load (id int64 pk, v int64, "
                                                 "w float64; created if missing)")
    tn.add_argument("--load", type=non_negative_int, default=0,
                    help="commit this many random transactions per second (default 0: none)")
    tn.add_argument("--flush-every", type=positive_float, default=2.0, help="seconds between flushes under load")
    tn.add_argument("--checkpoint-every", type=positive_float, default=5.0,
                    help="seconds between checkpoints under load")
    from logtide.engine.hakeeper.host_cli import add_sender_argument
    add_sender_argument(tn, store_id=True)
    tn.set_defaults(func=run_tn)
    cn = roles.add_parser("cn", help="subscribe to tables of a TN and report what it reads")
    cn.add_argument("--tn", required=True, help="the TN's host:port")
    cn.add_argument("--objects", required=True, help="the TN's object store (directory or URI)")
    cn.add_argument("--table", action="append", required=True)
    cn.add_argument("--seconds", type=non_negative_float, default=0,
                    help="stop after this long, the wait for the TN included (0: run until killed)")
    add_sender_argument(cn, store_id=True)
    cn.set_defaults(func=run_cn)


def run_tn(args: argparse.Namespace) -> int:
    import random

    import numpy as np

    from logtide.engine.logtail import TransactionNode
    from logtide.engine.logtail.service import serve
    tn = TransactionNode.open(args.dir)
    if args.table not in tn.tables:
        tn.create_table(args.table, {"id": "int64", "v": "int64", "w": "float64"}, "id")
    server, addr = serve(tn, args.address)
    # what recovery (checkpoint + log) brought back: a restarted TN starts from here
    print(json.dumps({"listening": addr, "objects": tn.store.uri, "recovered_ts": tn.last_ts,
                      "recovered_lsn": tn.last_lsn}), flush=True)
    from logtide.engine.hakeeper.host_cli import start_sender
    from logtide.engine.hakeeper.store_reports import tn_report
    from logtide.engine.hakeeper.store_role import StoreRole
    from logtide.engine.hakeeper.tn_commands import tn_command_runner
    stop = stop_event()   # SIGTERM, SIGINT, or HAKeeper's STOP_TN
    sender = start_sender(args, StoreRole.TN, "tn-1", addr, lambda sid: tn_report(tn, sid),
                          run_command=lambda sid: tn_command_runner(sid, stop))
    rng = random.Random(1)
    st = tn.tables.get(args.table)
    commits, last_flush, last_ckp, last_report = 0, time.monotonic(), time.monotonic(), time.monotonic()
    while not stop.is_set():
        if not args.load:
            stop.wait(0.5)
            continue
        x = tn.begin()
        ids = np.unique(np.array([rng.randrange(100_000) for _ in range(8)], dtype=np.int64))
        _, present = st.pk_index.get_many(ids)
        if (~present).any():
            new = ids[~present]
            x.insert(args.table, {"id": new, "v": new * 3, "w": new * 0.5})
        if present.any():
            old = ids[present]
            if rng.random() < 0.5:
                x.delete(args.table, old)
            else:
                x.update(args.table, {"id": old, "v": old + commits, "w": old * 1.5})
        ts = x.commit()
        commits += 1
        now = time.monotonic()
        if now - last_flush > args.flush_every:
            tn.flush()
            last_flush = now
        if now - last_ckp > args.checkpoint_every:
            tn.checkpoint_now()
            last_ckp = now
        if now - last_report > 1.0:
            print(json.dumps({"commits": commits, "ts": ts, "rows": len(st.pk_index)}), flush=True)
            last_report = now
        stop.wait(1.0 / args.load)
    if sender is not None:
        sender.stop()
    server.stop(1.0)
    tn.close()
    tn.log.close()
    return 0


def run_cn(args: argparse.Namespace) -> int:
    from logtide.engine.logtail import ComputeNode
    from logtide.engine.logtail.transport import RemoteStream
    from logtide.engine.objectstore import ObjectStore
    # with --seconds, the wait for the TN (connect, subscribe) counts against it; else 30 s for each
    t0 = time.monotonic()

    def left() -> float:
        return max(0.0, args.seconds - (time.monotonic() - t0)) if args.seconds else 30.0

    cn = ComputeNode(lambda: RemoteStream(args.tn, "cli"), ObjectStore(args.objects), "cli",
                     connect_timeout=args.seconds or 30.0)
    sender = None
    try:      # close() on every way out: it sees the CN's threads end before the interpreter does
        for t in args.table:
            cn.subscribe(t, timeout=left())
        import os

        from logtide.engine.hakeeper.host_cli import start_sender
        from logtide.engine.hakeeper.store_reports import cn_report
        from logtide.engine.hakeeper.store_role import StoreRole
        sender = start_sender(args, StoreRole.CN, f"cn-{os.getpid()}", "",
                              lambda sid: cn_report(cn, args.table, sid))
        stop = stop_event()
        while not stop.is_set() and (not args.seconds or time.monotonic() - t0 < args.seconds):
            stop.wait(min(1.0, args.seconds or 1.0))
            for t in args.table:
                ts = cn.watermark(t)
                tab = cn.read(t, ts)
                ids = tab.column(cn.states[t].tdef.pk).to_numpy()
                print(json.dumps({"table": t, "ts": ts, "rows": tab.num_rows, "id_sum": int(ids.sum()),
                                  "reconnects": cn.reconnects}), flush=True)
    finally:
        if sender is not None:
            sender.stop()
        cn.close()
    return 0

