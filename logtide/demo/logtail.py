"""Demo stage: logical replication. A TN under load with flushes and a checkpoint, 2 CNs (one in-process,
one over gRPC), commit -> visible latency, and every CN's reads checked against a reference model."""
from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np

ORDER = 60
NAME = "logtail"
TITLE = "Logtail: a TN streams changes to 2 CNs (in-process and gRPC); snapshot reads match the model"

COLS = {"id": "int64", "qty": "int32", "price": "float64"}


def run(workdir: Path) -> bool:
    from logtide.engine.logtail import ComputeNode, ReferenceModel, TransactionNode
    from logtide.engine.logtail.service import serve
    from logtide.engine.logtail.transport import RemoteStream

    tn = TransactionNode.open(workdir / "tn")
    server, addr = serve(tn)
    tn.create_table("orders", COLS, "id")
    ref = ReferenceModel(list(COLS), "id")
    cn_local = ComputeNode(lambda: tn.connect("cn-local"), tn.store, "cn-local")
    cn_remote = ComputeNode(lambda: RemoteStream(addr, "cn-remote"), tn.store, "cn-remote")
    cns = (cn_local, cn_remote)
    for cn in cns:
        cn.subscribe("orders")
    print(f"TN at {addr}; CNs: cn-local (in-process), cn-remote (framed carrier)")

    rng = random.Random(60)
    live: set[int] = set()
    stamps, lat = [], {cn.name: [] for cn in cns}
    seconds, t_end = 6.0, time.monotonic() + 6.0
    flushes = ckps = commits = rows = 0
    last_print = time.monotonic()
    while time.monotonic() < t_end:
        x = tn.begin()
        keys = {rng.randrange(20_000) for _ in range(rng.randint(1, 40))}
        ups, dels = [], []
        for k in sorted(keys):
            row = {"id": k, "qty": rng.randrange(1000), "price": round(rng.random() * 100, 2)}
            if k in live and rng.random() < 0.3:
                dels.append(k)
            else:
                ups.append(row)
        new = [r for r in ups if r["id"] not in live]
        upd = [r for r in ups if r["id"] in live]
        if new:
            x.insert("orders", {c: [r[c] for r in new] for c in COLS})
        if upd:
            x.update("orders", {c: [r[c] for r in upd] for c in COLS})
        if dels:
            x.delete("orders", dels)
        t0 = time.perf_counter()
        ts = x.commit()
        for cn in cns:
            cn.wait_for("orders", ts)
            lat[cn.name].append(time.perf_counter() - t0)
        ref.commit(ts, ups, dels)
        live |= {r["id"] for r in ups}
        live -= set(dels)
        stamps.append(ts)
        commits += 1
        rows += len(ups) + len(dels)
        if commits % 300 == 0:
            tn.flush()
            flushes += 1
        if commits == 900:
            tn.checkpoint_now()
            ckps += 1
        if time.monotonic() - last_print > 1.0:
            print(f"  {commits} commits, {rows} row changes, {len(live)} live rows, {flushes} flushes, "
                  f"{ckps} checkpoints, watermarks {[cn.watermark('orders') for cn in cns]}", flush=True)
            last_print = time.monotonic()
    if not ckps:
        tn.checkpoint_now()
        ckps += 1
    # a third CN joins after the checkpoint: it starts from the checkpoint plus the logtail after it
    late = ComputeNode(lambda: tn.connect("cn-late"), tn.store, "cn-late")
    late.subscribe("orders")
    print(f"load: {commits} commits in {seconds:.0f} s ({commits / seconds:,.0f}/s), {rows} row changes, "
          f"{flushes} flushes, {ckps} checkpoint(s), {len(tn.store.list('orders-'))} objects")
    for cn in cns:
        a = np.array(lat[cn.name]) * 1e3
        print(f"commit -> visible on {cn.name}: p50 {np.percentile(a, 50):.2f} ms, p99 {np.percentile(a, 99):.2f} ms")

    ok = True
    checks = sorted(rng.sample(stamps, min(30, len(stamps)))) + [stamps[-1]]
    t0 = time.perf_counter()
    for cn in cns + (late,):
        bad = 0
        for ts in checks:
            if ReferenceModel.rows_of(cn.read("orders", ts), "id") != ref.at(ts):
                bad += 1
        with_idx = cn.read("orders", stamps[-1])
        without = cn.read("orders", stamps[-1], use_block_index=False)
        same = with_idx.equals(without)
        print(f"{cn.name}: {len(checks)} snapshot reads vs the model: {len(checks) - bad} equal; "
              f"block index on/off equal: {same}; reconnects {cn.reconnects}")
        ok &= bad == 0 and same
    print(f"verification reads: {3 * len(checks)} in {time.perf_counter() - t0:.2f} s")
    for cn in cns + (late,):
        cn.close()
    server.stop(0.5)
    tn.close()
    tn.log.close()
    return ok
