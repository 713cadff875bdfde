"""Real processes: `logtide meta serve --log` on three `logtide logservice serve --raft` replicas.
Writers run puts, CAS and transactions (each on its own keys, checked against a dict model;
every reply's seq above the last) while the leader replica is SIGKILLed; a watch sees every
change. Then the meta-service is SIGKILLed and restarted on the replicated log: its state is the
model's, seq went on, and a new watch works. With the whole group down, a write fails with a
typed error within the deadline, and once the group is back writes go on."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_logservice_raft_kill import Cluster  # noqa: E402 - the raft tests' process cluster, reused

from logtide import connect_meta  # noqa: E402
from logtide.engine.logservice.replicated_client import NoLeaderError  # noqa: E402
from logtide.engine.meta import Exact, cond, op  # noqa: E402

WRITERS = 6
LOG_DEADLINE = "8"   # no leader this long: a typed error (failover takes 1-2 s, more on a loaded machine)


def _start(tmp, d, addrs):
    out = open(tmp / "meta.log", "ab")
    p = subprocess.Popen([sys.executable, "-m", "logtide", "meta", "serve", "--dir", str(d), "--log", addrs,
                          "--log-deadline", LOG_DEADLINE, "--listen", "127.0.0.1:0", "--snapshot-every", "60"],
                         stdout=subprocess.PIPE, stderr=out, text=True, cwd=tmp)
    line = p.stdout.readline()
    assert line.startswith("meta-service listening on "), line + (tmp / "meta.log").read_text()[-2000:]
    return p, line.split()[-1]


def _writer(addr, w, model, seqs, stop, errors):
    """Puts, CAS (one that must succeed, one that must fail) and a two-key transaction on keys
    w/*, mirrored in `model`; every seq handed back is recorded."""
    try:
        with connect_meta(addr, timeout=30) as c:
            i = 0
            while not stop.is_set():
                i += 1
                k = f"w{w}/k{i % 5}"
                if i % 3 == 0 and k in model:
                    cur = model[k]
                    prev, res = c.upsert(k, b"cas-%d" % i, Exact(cur[0]))
                    assert prev.seq == cur[0] and res.data == b"cas-%d" % i, (k, cur, prev, res)
                    model[k] = (res.seq, res.data)
                    seqs.append(res.seq)
                    prev, res = c.upsert(k, b"stale", Exact(cur[0]))   # the seq moved on: refused
                    assert res.seq == model[k][0] and res.data == model[k][1]
                elif i % 3 == 1:
                    a, b = f"w{w}/t0", f"w{w}/t1"
                    s = model.get(a, (0, None))[0]
                    r = c.txn(conditions=[cond.seq(a, "==", s)],
                              if_then=[op.put(a, b"txn-%d" % i), op.put(b, b"txn-%d" % i)])
                    assert r.success, r
                    for key, resp in ((a, r.responses[0]), (b, r.responses[1])):
                        model[key] = (resp.current.seq, resp.current.data)
                        seqs.append(resp.current.seq)
                else:
                    prev, res = c.upsert(k, b"put-%d" % i)
                    model[k] = (res.seq, res.data)
                    seqs.append(res.seq)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def _start_writers(addr):
    """WRITERS threads running _writer: (models, seqs, stop event, errors, threads)."""
    models = [{} for _ in range(WRITERS)]
    seqs = [[] for _ in range(WRITERS)]
    stop, errors = threading.Event(), []
    threads = [threading.Thread(target=_writer, args=(addr, w, models[w], seqs[w], stop, errors))
               for w in range(WRITERS)]
    for t in threads:
        t.start()
    return models, seqs, stop, errors, threads


@pytest.mark.timeout(240)
def test_meta_service_on_a_replicated_log_survives_the_leader_replica_and_a_kill(tmp_path):
    cluster = Cluster(tmp_path)
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    d = tmp_path / "meta"
    procs = []
    try:
        cluster.leader()
        p, addr = _start(tmp_path, d, addrs)
        procs.append(p)
        watch_client = connect_meta(addr, timeout=30)
        watcher = watch_client.watch("w", "x")
        models, seqs, stop, errors, threads = _start_writers(addr)
        time.sleep(1.5)
        lead = cluster.leader()
        cluster.kill(lead)
        time.sleep(1.5)
        cluster.start(lead)
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        for s in seqs:
            assert s == sorted(s) and len(set(s)) == len(s), "a writer saw its seqs go back"
        every = [x for s in seqs for x in s]
        assert len(set(every)) == len(every), "two writes got the same seq"
        assert len(every) > 50
        model = {k: v for m in models for k, v in m.items()}
        # the watch saw each key's last change
        seen, end = {}, time.monotonic() + 30
        while any(seen.get(k) != v[0] for k, v in model.items()):
            ev = watcher.get(timeout=max(0.1, end - time.monotonic()))
            assert ev is not None, "the watch missed changes"
            if ev.current is not None:
                seen[ev.key] = ev.current.seq
        watcher.close()
        watch_client.close()
        with connect_meta(addr) as c:
            seq_before = c.seq
            assert {k: (v.seq, v.data) for k, v in c.list("w")} == model

        # SIGKILL the meta-service; restarted on the replicated log it has the same state
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        p, addr = _start(tmp_path, d, addrs)
        procs.append(p)
        with connect_meta(addr) as c:
            assert {k: (v.seq, v.data) for k, v in c.list("w")} == model
            assert c.seq == seq_before
            w = c.watch("w0/k0")
            prev, res = c.upsert("w0/k0", b"after restart")
            ev = w.get(timeout=30)
            assert ev is not None and ev.current.seq == res.seq and res.seq > seq_before
            w.close()

            # the whole group down: a typed error within the deadline, and the server stays up
            for i in list(cluster.procs):
                cluster.kill(i)
            t0 = time.monotonic()
            with pytest.raises(NoLeaderError):
                c.upsert("w0/k1", b"no log")
            assert time.monotonic() - t0 < 2 * float(LOG_DEADLINE) + 5
            assert c.get("w0/k0").data == b"after restart"
            # the group back: the service re-reads the log up to a fence, then writes go on
            for i in cluster.ports:
                cluster.start(i)
            cluster.leader()
            prev, res = c.upsert("w0/k1", b"group back")
            assert res.seq > seq_before + 1
            assert {k: (v.seq, v.data) for k, v in c.list("w1/")} == {k: v for k, v in model.items() if k.startswith("w1/")}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        cluster.stop()


@pytest.mark.timeout(240)
def test_meta_service_rides_out_frozen_replicas(tmp_path):
    """The leader replica SIGSTOPped under load: writes go on through the new leader, none fails;
    thawed, it rejoins and every replica holds the same log. The whole group frozen: a write ends
    in NoLeaderError within the deadline and reads still answer; thawed, writes go on."""
    from frozen import freeze, thaw
    from replica_logs import replica_logs
    cluster = Cluster(tmp_path)
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    p = None
    frozen = []
    try:
        cluster.leader()
        p, addr = _start(tmp_path, tmp_path / "meta", addrs)
        models, seqs, stop, errors, threads = _start_writers(addr)
        time.sleep(1.5)
        lead = cluster.leader()
        before = sum(map(len, seqs))
        freeze(cluster.procs[lead].pid)
        frozen.append(lead)
        assert cluster.leader() != lead
        time.sleep(2.0)
        assert sum(map(len, seqs)) > before, "no write went through while the old leader was frozen"
        thaw(cluster.procs[lead].pid)
        frozen.remove(lead)
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        every = [x for s in seqs for x in s]
        assert len(set(every)) == len(every), "two writes got the same seq"
        model = {k: v for m in models for k, v in m.items()}
        with connect_meta(addr) as c:
            assert {k: (v.seq, v.data) for k, v in c.list("w")} == model
        logs = replica_logs(cluster)
        assert logs[1] == logs[2] == logs[3], "a thawed replica disagrees about the log"

        with connect_meta(addr) as c:
            for i in list(cluster.procs):
                freeze(cluster.procs[i].pid)
                frozen.append(i)
            t0 = time.monotonic()
            with pytest.raises(NoLeaderError):
                c.upsert("w0/frozen", b"no log")
            assert time.monotonic() - t0 < 2 * float(LOG_DEADLINE) + 5
            assert {k: (v.seq, v.data) for k, v in c.list("w1/")} == {k: v for k, v in model.items() if k.startswith("w1/")}
            for i in list(frozen):
                thaw(cluster.procs[i].pid)
                frozen.remove(i)
            cluster.leader()
            prev, res = c.upsert("w0/frozen", b"group thawed")
            assert res.seq > max(every)
            assert c.get("w0/frozen").data == b"group thawed"
        logs = replica_logs(cluster)
        assert logs[1] == logs[2] == logs[3]
    finally:
        for i in frozen:
            thaw(cluster.procs[i].pid)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        cluster.stop()
