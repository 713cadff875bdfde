"""Demo stage: the log service on the demo directory: group commit, sequential read, networked (framed
carrier), truncation, restart."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

ORDER = 30
NAME = "logservice"
TITLE = "Log service: durable segmented log with group commit, networked client, truncation and TSO"


def _appenders(svc, threads: int, per: int, payload: bytes) -> float:
    start = threading.Barrier(threads + 1)

    def body(t):
        start.wait()
        for _ in range(per):
            svc.append(payload, replica_id=t)

    ths = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for th in ths:
        th.start()
    t0 = time.perf_counter()
    start.wait()
    for th in ths:
        th.join()
    return threads * per / (time.perf_counter() - t0)


def _payload(lsn: int, size: int) -> bytes:
    head = lsn.to_bytes(8, "little")
    return (head * (size // 8 + 1))[:size]


def run(workdir: Path) -> bool:
    from logtide import LogService, connect_logservice
    from logtide.engine.logservice.rpc_service import LogServiceServer

    ok = True
    path = workdir / "log"
    svc = LogService.open(path, fsync="always", segment_size=16 << 20, truncation_interval=0.1)

    # 1. group commit: every append is durable (fdatasync) before it returns
    single = _appenders(svc, 1, 200, b"\xa5" * 256)
    g0, l0 = svc.stats()["groups"], svc.get_latest_lsn()
    many = _appenders(svc, 32, 100, b"\x5a" * 256)
    st = svc.stats()
    per_group = (st["latest_lsn"] - l0) / max(1, st["groups"] - g0)
    print(f"append, fsync=always, 256 B: 1 appender {single:,.0f}/s   32 appenders {many:,.0f}/s "
          f"({many / single:.1f}x, {per_group:.1f} records per fdatasync)", flush=True)

    # 2. bulk load then sequential read from the page cache, verifying every record
    first = svc.get_latest_lsn() + 1
    total, size = 48 << 20, 4096
    n = total // size
    t0 = time.perf_counter()
    lsn, last_print = first, t0
    while lsn < first + n:
        k = min(256, first + n - lsn)
        got = svc.append_many([_payload(lsn + i, size) for i in range(k)])
        ok &= got == lsn
        lsn += k
        if time.perf_counter() - last_print > 2:
            print(f"  loaded {lsn - first:,} of {n:,} records", flush=True)
            last_print = time.perf_counter()
    load = n * size / (time.perf_counter() - t0) / 1e6
    t0 = time.perf_counter()
    lsn, nbytes, bad = first, 0, 0
    while lsn < first + n:
        b = svc.read_batch(lsn, 4 << 20)
        nbytes += b.data_bytes()
        lsn = b.next_lsn
    read_s = time.perf_counter() - t0
    lsn = first
    while lsn < first + n:  # content check, apart from the timing
        recs, lsn = svc.read(lsn, 4 << 20)
        bad += sum(r.payload != _payload(r.lsn, size) for r in recs)
    print(f"bulk append (append_many, fsync=always): {load:,.0f} MB/s   "
          f"sequential read_batch: {nbytes / read_s / 1e6:,.0f} MB/s ({nbytes / 1e6:.0f} MB, goal >= 500)   "
          f"bad records: {bad}", flush=True)
    ok &= bad == 0 and nbytes == n * (size + 12)

    # 3. the same service over the network on 127.0.0.1 (the framed carrier, logtide's own clients')
    server = LogServiceServer(svc, "127.0.0.1:0")
    client = connect_logservice(server.address)
    try:
        t0 = time.perf_counter()
        lsn, gbytes = first, 0
        while lsn < first + n:
            b = client.read_batch(lsn, 4 << 20)
            gbytes += b.data_bytes()
            lsn = b.next_lsn
        g_read = gbytes / (time.perf_counter() - t0) / 1e6
        t0 = time.perf_counter()
        lsns = [client.append(_payload(i, 256), replica_id=7) for i in range(300)]
        g_append = 300 / (time.perf_counter() - t0)
        ok &= lsns == list(range(lsns[0], lsns[0] + 300))
        recs, _ = client.read(lsns[0], 1 << 20)
        ok &= [r.payload for r in recs[:300]] == [_payload(i, 256) for i in range(300)]
        ok &= gbytes == nbytes
        print(f"framed carrier at {server.address}: append {g_append:,.0f}/s (1 client, fsync=always)   "
              f"read_batch {g_read:,.0f} MB/s", flush=True)
    finally:
        client.close()
        server.stop()

    # 4. truncation: a registered reader holds segments until it reports progress
    latest = svc.get_latest_lsn()
    svc.register_reader("demo-ro")
    segs = lambda: sorted(f for f in os.listdir(path) if f.endswith(".log"))  # noqa: E731
    before = segs()
    svc.truncate(latest - 10)
    time.sleep(0.3)
    held = segs() == before
    svc.report_replayed("demo-ro", latest)
    t0 = time.monotonic()
    while len(segs()) > 1 and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    after = segs()
    print(f"truncate({latest - 10}): {len(before)} segments; held while the reader lagged: {held}; "
          f"after it reported LSN {latest}: {len(after)} segment(s) left", flush=True)
    ok &= held and len(after) < len(before)

    # 5. restart: the log, the truncated LSN and the TSO come back
    tso = svc.get_tso_timestamp(1000)
    svc.close()
    t0 = time.perf_counter()
    svc = LogService.open(path)
    reopen = time.perf_counter() - t0
    tso2 = svc.get_tso_timestamp(1)
    print(f"reopen in {reopen * 1000:.0f} ms: latest LSN {svc.get_latest_lsn()} (was {latest}), truncated LSN "
          f"{svc.get_truncated_lsn()}, TSO {tso2} >= {tso + 1000}", flush=True)
    ok &= svc.get_latest_lsn() == latest and svc.get_truncated_lsn() == latest - 10 and tso2 >= tso + 1000
    svc.close()
    return bool(ok)
