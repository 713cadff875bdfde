"""Demo stage: physical replication. A primary and 2 RO nodes under load; apply rate, lag, lazy-replay
counts, and every page both RO nodes return checked against a model that replays the WAL from scratch."""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np

ORDER = 50
NAME = "replay"
TITLE = "Physical replication: primary + 2 RO nodes, WAL-meta streaming, lazy replay with LogIndex"

RELS = (16384, 16385, 16386)
SECONDS = 6.0



def _caught_up(ro, lsn: int, timeout: float) -> bool:
    """True once `ro` has applied `lsn`; False if it did not within `timeout` seconds."""
    from logtide.errors import ReplicaTimeoutError
    try:
        return ro.wait_applied(lsn, timeout=timeout)
    except ReplicaTimeoutError:
        return False

def _apply_rates(d: Path, n: int = 20_000) -> tuple[dict, int]:
    from logtide._ext import xlogwriter as xw
    from logtide.engine.logservice import LogService
    from logtide.replay.meta_stream import decode_batch, encode_batch
    from logtide.replay.primary import Primary
    from logtide.replay.ro_node import ReadOnlyNode
    log = LogService.open(d / "log", fsync="never")
    primary = Primary(d, log=log, checkpoint_interval=0, pool_pages=4096)
    rng = random.Random(7)
    while primary.write_lsn < n:
        primary.insert_many(rng.choice(RELS), [rng.randbytes(rng.randint(40, 200)) for _ in range(100)])
    final = primary.write_lsn
    frames, lsn = [], 1
    while lsn <= final:
        recs = primary.wal.read(lsn, 1 << 20)[:512]
        frames.append(encode_batch([l for l, _ in recs], [xw.wal_meta(r) for _, r in recs], final, 0))
        lsn = recs[-1][0] + 1
    rates = {}
    for mode in ("lazy", "eager"):
        ro = ReadOnlyNode(d, log, node_id=9, mode=mode, background=False, pool_pages=8192, feedback_interval=3600)
        ts = time.perf_counter()
        for f in frames:
            ro.apply_batch(decode_batch(f))
        rates[mode] = final / (time.perf_counter() - ts)
        ro.close()
    primary.close()
    log.close()
    return rates, final


def run(workdir: Path) -> bool:
    from logtide.engine.logservice import LogService
    from logtide.replay.primary import Primary, rel_tag
    from logtide.replay.ro_node import ReadOnlyNode
    from logtide.replay.transport_inproc import connect_inprocess
    from logtide.replay.verify import ScratchModel

    d = Path(workdir) / "replay"
    log = LogService.open(d / "log")
    log.register_reader("demo-verifier", 0)  # the verification model replays the WAL from LSN 1
    seg = 32  # small LogIndex memtables: tables get saved, so truncation shows within the demo
    primary = Primary(d, log=log, pool_pages=64, checkpoint_interval=0.1, logindex_segments=seg)
    ros = [ReadOnlyNode(d, log, node_id=i, pool_pages=32, feedback_interval=0.2, logindex_segments=seg)
           for i in (1, 2)]
    links = [connect_inprocess(primary, ro) for ro in ros]
    stop = threading.Event()
    samples, lags, errors = [], [], []

    def writer(seed):
        rng = random.Random(seed)
        mine = []
        try:
            while not stop.is_set():
                rel = rng.choice(RELS)
                if rng.random() < 0.1:
                    tids = primary.insert_many(rel, [rng.randbytes(rng.randint(20, 300)) for _ in range(20)])
                    mine.extend((rel, t) for t in tids)
                elif mine and rng.random() < 0.35:
                    i = rng.randrange(len(mine))
                    r, tid = mine[i]
                    mine[i] = (r, primary.update(r, tid, rng.randbytes(rng.randint(20, 600))))
                else:
                    mine.append((rel, primary.insert(rel, rng.randbytes(rng.randint(20, 300)))))
        except Exception as exc:
            errors.append(exc)

    def reader(seed):
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                ro = rng.choice(ros)
                rel = rng.choice(RELS)
                n = primary.nblocks(rel)
                if n:
                    tag = rel_tag(rel, rng.randrange(n))
                    page, lsn = ro.read_page(tag)
                    if rng.random() < 0.1:  # keep one read in ten for the final verification
                        samples.append((tag, lsn, page))
        except Exception as exc:
            errors.append(exc)

    def lag_probe():
        # a commit on the primary, then the time until it is visible (applied) at both RO nodes
        try:
            while not stop.is_set():
                primary.insert(RELS[0], b"probe")
                lsn = primary.write_lsn
                t0 = time.perf_counter()
                if all(_caught_up(ro, lsn, 10) for ro in ros):
                    lags.append(time.perf_counter() - t0)
                time.sleep(0.01)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    threads += [threading.Thread(target=reader, args=(100 + s,)) for s in range(3)]
    threads.append(threading.Thread(target=lag_probe))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    while time.perf_counter() - t0 < SECONDS:
        time.sleep(1.0)
        st = ros[0].stats()
        print(f"  t={time.perf_counter() - t0:4.1f}s write LSN {primary.write_lsn:7d}  RO1 applied {st['applied_lsn']:7d}"
              f"  RO2 applied {ros[1].applied_lsn:7d}  consistent {primary.consistent_lsn:7d}"
              f"  truncated {primary.truncated_lsn:7d}", flush=True)
    stop.set()
    for t in threads:
        t.join(60)
    elapsed = time.perf_counter() - t0
    final = primary.write_lsn
    caught_up = all(_caught_up(ro, final, 30) for ro in ros)
    for ro in ros:
        for rel in RELS:
            for b in range(primary.nblocks(rel)):
                page, lsn = ro.read_page(rel_tag(rel, b))
                samples.append((rel_tag(rel, b), lsn, page))
    model = ScratchModel(primary.wal, final)
    bad = sum(1 for tag, lsn, page in samples if not model.same(tag, lsn, page))

    # the startup worker's apply rate on its own, against eager replay of the same stream: a separate
    # 20,000-record WAL (default LogIndex memtables) replayed by a fresh lazy and a fresh eager node
    rates, nrec = _apply_rates(Path(workdir) / "replay_rates")
    lag = np.array(lags) * 1e3 if lags else np.array([float("nan")])
    print(f"primary: {final} WAL records in {elapsed:.1f}s ({final / elapsed:.0f}/s), "
          f"{primary.store.pages_written} page writes, {primary.checkpoints} checkpoints, "
          f"consistent LSN {primary.consistent_lsn}, log truncated to {primary.truncated_lsn}")
    print(f"RO apply rate over a {nrec}-record stream (WAL meta indexed + marked OUTDATED): lazy "
          f"{rates['lazy']:,.0f} rec/s, eager replay {rates['eager']:,.0f} rec/s -> {rates['lazy'] / rates['eager']:.1f}x")
    print(f"lag commit -> applied at both RO nodes: p50 {np.percentile(lag, 50):.2f} ms, p99 {np.percentile(lag, 99):.2f} ms "
          f"({len(lags)} probes)")
    for ro in ros:
        s = ro.stats()
        print(f"RO {ro.node_id}: reads {s['reads']} (hot {s['hot']}, cold {s['cold']}, outdated {s['outdated']}), "
              f"records replayed lazily {s['replayed']}, background replayed {s['bg_replayed']} / evicted "
              f"{s['bg_evicted']}, marked OUTDATED {s['marked_outdated']}, XLOG buffer hits {s['xlog']['hits']} "
              f"misses {s['xlog']['misses']}")
    print(f"page equality vs a from-scratch WAL replay: {len(samples) - bad} of {len(samples)} pages identical")
    for l in links:
        l.close()
    for ro in ros:
        ro.close()
    primary.close()
    log.close()
    if errors:
        print(f"FAIL: errors in workload threads: {errors[:3]!r}")
    if not caught_up:
        print(f"FAIL: an RO node did not reach the final write LSN {final}")
    if bad:
        print(f"FAIL: {bad} pages differ from the model")
    return caught_up and bad == 0 and not errors and len(samples) > 0
