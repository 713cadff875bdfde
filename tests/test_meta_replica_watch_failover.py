"""Watch failover on a meta-service group of real processes: the replica a watcher is on is
SIGKILLed mid-stream while writers run (once as a follower, once as the leader); the watcher
resumes on another replica after the cursor of the last event it saw (`watch(..., after=ev)`).

Checked against the writes, not against the service: per key, each event's prev is the previous
event's current (no gap, no duplicate), every acknowledged write is an event, cursors and the
seqs of puts strictly increase, and the last event of each key is the key's final state."""
import threading
import time

import pytest

from logtide import connect_meta
from logtide.engine.meta import DELETE, op
from logtide.errors import MetaClosedError, MetaError, MetaUnavailableError

from meta_cluster import MetaCluster, wait_ready

KEYS = 6          # keys per writer: each key's chain of values is long
WRITERS = 3
PREFIX, END = "wf/", "wf0"


def _writer(addrs, w, stop, acked, lock):
    n = 0
    with connect_meta(addrs, timeout=10) as c:
        while not stop.is_set():
            n += 1
            key = f"{PREFIX}{w}/{n % KEYS}"
            try:
                if n % 11 == 0:
                    prev, _cur = c.upsert(key, DELETE)
                    if prev is None:    # nothing to delete: no change, no event
                        continue
                    got = None
                elif n % 7 == 0:    # one entry, two changes: the cursor's position tells them apart
                    r = c.txn(if_then=[op.put(key, b"t%d" % n), op.put(f"{PREFIX}{w}/pair", b"t%d" % n)])
                    assert r.success
                    got = b"t%d" % n
                    with lock:
                        acked.append((f"{PREFIX}{w}/pair", got))
                else:
                    _prev, cur = c.upsert(key, b"v%d" % n)
                    got = cur.data
            except MetaError:
                time.sleep(0.02)    # outcome unknown (or refused): not counted either way
                continue
            with lock:
                acked.append((key, got))


class _Watcher:
    """Follows the range across replicas: on a broken stream, watch again after the last event's
    cursor, on the next replica that answers (each through its own client pinned to it)."""

    def __init__(self, addrs):
        self.addrs = list(addrs)
        self.events, self.resumes, self.replicas = [], 0, []
        self.stop = threading.Event()
        self.error = None
        self.client = self.w = None
        self.target = None
        self._open(self.addrs[0], None)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _open(self, first, after):
        """Watch on `first`, else on the replicas after it in turn, until one answers."""
        i = self.addrs.index(first)
        end = time.monotonic() + 60
        while True:
            addr = self.addrs[i % len(self.addrs)]
            client = None
            try:      # a replica that is down refuses the connection, one still starting the watch
                client = connect_meta(addr, timeout=5, follow_leader=False)
                self.w = client.watch(PREFIX, END, after=after)
            except MetaUnavailableError:
                if client is not None:
                    client.close()
                assert time.monotonic() < end, "no replica took the watch"
                i += 1
                continue
            old, self.client = self.client, client
            if old is not None:
                old.close()
            self.replicas.append(addr)
            return

    def on(self):
        return self.replicas[-1]

    def move(self, addr):
        """Resume on `addr` (after the last event), leaving the current replica."""
        self.target = addr
        self.w.close()

    def _run(self):
        try:
            while not self.stop.is_set():
                try:
                    ev = self.w.get(timeout=0.2)
                except (MetaUnavailableError, MetaClosedError):
                    self.w.close()
                    self.resumes += 1
                    target = self.target or self.addrs[(self.addrs.index(self.on()) + 1) % len(self.addrs)]
                    self.target = None
                    self._open(target, self.events[-1] if self.events else None)
                    continue
                if ev is not None:
                    self.events.append(ev)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def close(self):
        self.stop.set()
        self.t.join(30)
        self.w.close()
        self.client.close()


def _last(events):
    last = {}
    for e in list(events):
        last[e.key] = e.current
    return {k: v.data for k, v in last.items() if v is not None}


def _check(events, acked, final):
    cursors = [e.cursor for e in events]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors), "a duplicate or a cursor out of order"
    seqs = [e.current.seq for e in events if e.current is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    last = {}
    for e in events:
        assert e.prev == last.get(e.key), f"gap or duplicate at {e.key}: prev {e.prev} after {last.get(e.key)}"
        last[e.key] = e.current
    seen = {(e.key, e.current.data if e.current else None) for e in events}
    missing = [a for a in acked if a not in seen]
    assert not missing, f"acknowledged writes with no event: {missing[:5]}"
    assert {k: v.data for k, v in last.items() if v is not None} == final


@pytest.mark.timeout(240)
def test_a_watcher_resumes_on_another_replica_with_no_gap_and_no_duplicate(tmp_path):
    cluster = MetaCluster(tmp_path)
    stop, lock, acked = threading.Event(), threading.Lock(), []
    watcher = None
    try:
        wait_ready(cluster)
        lead = cluster.leader()
        follower = next(i for i in (1, 2, 3) if i != lead)
        order = [follower] + [i for i in (1, 2, 3) if i != follower]
        watcher = _Watcher([cluster.addr(i) for i in order])   # on the follower first
        writers = [threading.Thread(target=_writer, args=(cluster.addrs(), w, stop, acked, lock), daemon=True)
                   for w in range(WRITERS)]
        for t in writers:
            t.start()
        time.sleep(1.5)
        for round_ in range(2):       # kill the watcher's replica: a follower, then the leader
            victim = next(i for i in cluster.ports if cluster.addr(i) == watcher.on())
            if round_ == 1:
                lead = cluster.leader()
                if victim != lead:    # resume on the leader first (a resume too), then kill it
                    watcher.move(cluster.addr(lead))
                    end = time.monotonic() + 30
                    while watcher.on() != cluster.addr(lead):
                        assert time.monotonic() < end and watcher.error is None, watcher.error
                        time.sleep(0.05)
                    time.sleep(1.0)
                    victim = lead
            n = len(watcher.events)
            assert n > 0, "no event before the kill"
            cluster.kill(victim)
            time.sleep(2.0)           # writers go on while the watcher resumes elsewhere
            cluster.start(victim)
            end = time.monotonic() + 60
            while len(watcher.events) < n + 50 or watcher.on() == cluster.addr(victim):
                assert watcher.error is None, watcher.error
                assert time.monotonic() < end, f"the watcher did not resume ({watcher.resumes} resumes)"
                time.sleep(0.1)
        time.sleep(1.0)
        stop.set()
        for t in writers:
            t.join(30)
        with connect_meta(cluster.addrs(), timeout=30) as c:
            final = {k: v.data for k, v in c.list(PREFIX)}
        end = time.monotonic() + 30   # the watcher drains the last writes
        while _last(watcher.events) != final and time.monotonic() < end:
            time.sleep(0.1)
        watcher.close()
        assert watcher.error is None, watcher.error
        assert watcher.resumes >= 2 and len(set(watcher.replicas)) >= 2
        assert len(acked) > 100
        _check(watcher.events, acked, final)
        print(f"watch failover: {len(watcher.events)} events, {len(acked)} acknowledged writes, "
              f"{watcher.resumes} resumes on {watcher.replicas}")
    finally:
        stop.set()
        if watcher is not None:
            watcher.stop.set()
        cluster.stop()
