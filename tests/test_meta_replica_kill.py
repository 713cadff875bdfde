"""Real processes: three `logtide meta serve --raft` replicas on loopback; clients run upserts, CAS,
transactions, fetch_add_u64 and linearizable gets on shared keys while replicas are SIGKILLed (the
leader, a follower, two at once: 15 rounds). Afterwards: every replica holds the same state; the
history of each key is linearizable (lincheck, KVKeyModel), so no acknowledged write is lost and no
read was stale; every acknowledged seq is unique, grows per client and in real time; fetch_add
results are unique. A replica down past a compaction catches up through a snapshot."""
import random
import threading
import time

import pytest

from logtide import connect_meta
from logtide.engine.meta import Exact, cond, op
from logtide.engine.raft.lincheck import INF, UNKNOWN, KVKeyModel, Operation, check_operations
from logtide.errors import MetaNotLeader, MetaUnavailableError

from meta_cluster import MetaCluster, wait_ready

KEYS = [f"k{i}" for i in range(6)]
WRITERS = 5


def _writer(addrs, w, t0, history, adds, stop, lock, errors):
    """Random operations on shared keys. history: [key, input, call, output, ret, client, new seq];
    adds: (call, ret, before, after, after_seq) of acknowledged fetch-adds."""
    rnd = random.Random(w)
    n = 0
    c = connect_meta(addrs, timeout=8)
    try:
        while not stop.is_set():
            n += 1
            key = rnd.choice(KEYS)
            v = b"w%d-%d" % (w, n)
            kind = rnd.choice(["put", "put", "cas", "txn", "get", "add"])
            rec = None
            if kind == "get":
                rec = [key, ("get",), time.monotonic() - t0, UNKNOWN, INF, w, None]
            elif kind == "put":
                rec = [key, ("put", v), time.monotonic() - t0, UNKNOWN, INF, w, None]
            elif kind in ("cas", "txn"):
                try:
                    cur = c.get(key)
                except MetaUnavailableError:
                    continue
                expected = cur.seq if cur is not None else 0
                rec = [key, ("cas", expected, v), time.monotonic() - t0, UNKNOWN, INF, w, None]
            if rec is not None:
                with lock:
                    history.append(rec)
            call = time.monotonic() - t0
            try:
                if kind == "get":
                    g = c.get(key)
                    out = (g.seq, g.data) if g is not None else (0, None)
                elif kind == "put":
                    prev, res = c.upsert(key, v)
                    out = (prev.seq if prev else 0, prev.data if prev else None, res.seq)
                    rec[6] = res.seq
                elif kind == "cas":
                    prev, res = c.upsert(key, v, Exact(expected))
                    out = (prev.seq if prev else 0, prev.data if prev else None, res.seq if res else 0)
                    if res is not None and res != prev:
                        rec[6] = res.seq
                elif kind == "txn":
                    r = c.txn(conditions=[cond.seq(key, "==", expected)], if_then=[op.put(key, v)],
                              else_then=[op.get(key)])
                    if r.success:
                        p, cur = r.responses[0].prev, r.responses[0].current
                        out = (p.seq if p else 0, p.data if p else None, cur.seq)
                        rec[6] = cur.seq
                    else:
                        g = r.responses[0].value
                        out = (g.seq, g.data, g.seq) if g is not None else (0, None, 0)
                else:
                    r = c.txn(if_then=[op.fetch_add_u64("ctr", 1)]).responses[0]
                    adds.append((call, time.monotonic() - t0, r.before, r.after, r.after_seq, w))
                    continue
            except MetaNotLeader:
                if rec is not None and kind != "get":   # refused before it was proposed: it never happened
                    with lock:
                        history.remove(rec)
                continue
            except MetaUnavailableError:
                continue                                # unknown outcome: it may have taken effect
            rec[3], rec[4] = out, time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
    finally:
        c.close()


def _run(cluster, faults):
    history, adds, errors = [], [], []
    lock, stop = threading.Lock(), threading.Event()
    t0 = time.monotonic()
    wait_ready(cluster)
    threads = [threading.Thread(target=_writer, args=(cluster.addrs(), w, t0, history, adds, stop, lock, errors))
               for w in range(WRITERS)]
    for t in threads:
        t.start()
    try:
        faults()
        cluster.leader()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:3]
    return history, adds, t0


def _verify(cluster, history, adds, t0):
    # the final state, read linearizably, closes every key's history
    with connect_meta(cluster.addrs(), timeout=30) as c:
        for key in KEYS:
            call = time.monotonic() - t0
            g = c.get(key)
            history.append([key, ("get",), call, (g.seq, g.data) if g else (0, None), time.monotonic() - t0, -1, None])
        final = {k: (v.seq, v.data) for k, v in c.list("")}
        st = c.status()
    # every replica applied the same state (each answers a stale list of its own)
    cluster.wait_applied(st.applied_index)
    for i in cluster.ports:
        with connect_meta(cluster.addr(i), timeout=30, follow_leader=False) as r:
            assert {k: (v.seq, v.data) for k, v in r.list("", consistency="stale")} == final, f"replica {i} differs"

    done = [h for h in history if h[3] is not UNKNOWN]
    writes = [h for h in done if h[6] is not None]
    assert len(writes) > 100, f"only {len(writes)} writes were acknowledged"
    # seq: unique over every acknowledged write (fetch-adds too), growing per client and in real time
    seqs = [(h[2], h[4], h[6], h[5]) for h in writes] + [(a[0], a[1], a[4], a[5]) for a in adds]
    every = [s for _c, _r, s, _w in seqs]
    assert len(set(every)) == len(every), "two acknowledged writes got the same seq"
    for w in range(WRITERS):
        mine = [s for _c, _r, s, who in sorted(seqs) if who == w]
        assert mine == sorted(mine), f"writer {w} saw its seqs go back"
    by_ret = sorted((r, s) for _c, r, s, _w in seqs)
    best, k = 0, 0
    for call, _r, s, _w in sorted(seqs):
        while k < len(by_ret) and by_ret[k][0] < call:
            best = max(best, by_ret[k][1])
            k += 1
        assert s > best, f"seq {s} is not above seq {best} acknowledged before its call"
    # fetch_add: every result unique, each one step up
    afters = [a[3] for a in adds]
    assert len(set(afters)) == len(afters), "two fetch_adds returned the same value"
    assert all(a[3] == a[2] + 1 for a in adds)
    if "ctr" in final:
        assert int(final["ctr"][1]) >= max(afters, default=0)
    # each key's history is linearizable
    for key in KEYS:
        ops = [Operation(h[5], h[1], h[2], h[3], h[4]) for h in history if h[0] == key]
        res = check_operations(KVKeyModel(), ops)
        assert res.ok, f"the history of {key} is not linearizable ({len(ops)} ops, longest prefix {len(res.partial)})"


@pytest.mark.timeout(600)
def test_sigkill_rounds_lose_no_acknowledged_write(tmp_path):
    cluster = MetaCluster(tmp_path)

    def faults():
        rounds = ["leader"] * 6 + ["follower"] * 6 + ["two"] * 3
        for kind in rounds:
            time.sleep(0.5)
            lead = cluster.leader()
            others = [i for i in cluster.procs if i != lead]
            victims = {"leader": [lead], "follower": [others[0]], "two": [lead, others[0]]}[kind]
            for v in victims:
                cluster.kill(v)
            time.sleep(0.3)
            for v in victims:
                cluster.start(v)

    try:
        history, adds, t0 = _run(cluster, faults)
        _verify(cluster, history, adds, t0)
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_a_replica_down_past_compaction_catches_up_through_a_snapshot(tmp_path):
    # in Raft group 9 (--group): every batch, the snapshot's too, names it
    cluster = MetaCluster(tmp_path, extra=["--group", "9", "--snapshot-entries", "50", "--compact-keep", "5"])
    try:
        wait_ready(cluster)
        with connect_meta(cluster.addrs(), timeout=30) as c:
            for k in range(20):
                c.upsert(f"early/{k}", b"e")
            lead = cluster.leader()
            down = next(i for i in cluster.ports if i != lead)
            cluster.kill(down)
            for k in range(300):
                c.upsert(f"later/{k % 40}", b"%d" % k, ttl_ms=3_600_000 if k % 2 else None)
            lead = cluster.leader()
            first = cluster.status(lead).first_index
            assert first > 25, f"the leader did not compact its log (first index {first})"
            cluster.start(down)
            target = c.status().applied_index
            cluster.wait_applied(target, ids=[down])
            assert cluster.status(down).first_index > 25   # it starts from the snapshot, not from entry 1
            want = {k: (v.seq, v.data, v.meta) for k, v in c.list("")}
            seq = c.seq
        with connect_meta(cluster.addr(down), follow_leader=False) as r:
            assert {k: (v.seq, v.data, v.meta) for k, v in r.list("", consistency="stale")} == want
            assert r.status("stale").seq == seq
    finally:
        cluster.stop()
