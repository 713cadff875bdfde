"""Real processes: three `logtide logservice serve --raft` replicas on loopback, clients appending
(and reading, and taking TSO ranges) concurrently while replicas are SIGKILLed (the leader, a
follower, and all three at once, 15 rounds) or partitioned through loopback TCP proxies that
blackhole traffic (the leader isolated; one follower split from the other two). Afterwards every acknowledged append is present exactly
once, at the same LSN on every replica, no LSN ever held two records, and the recorded client
history is linearizable (lincheck)."""
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice.log_format import USER_RECORD
from logtide.engine.logservice.replicated_client import NoLeaderError
from logtide.engine.raft.lincheck import INF, UNKNOWN, LogModel, Operation, check_operations
from logtide.errors import LogtideError

from ports import free_ports  # noqa: E402
from replica_logs import replica_logs, settled_leader  # noqa: E402
from frozen import freeze

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
TICK = "0.05"  # 0.5-1 s elections keep the rounds short; the defaults are 0.1 s x 10 ticks


class Cluster:
    def __init__(self, tmp_path, n=3, proxied=False, extra=(), start_now=None):
        self.tmp = tmp_path
        self.extra = list(extra)
        self.ports = dict(zip(range(1, n + 1), free_ports(n)))
        self.proxies = {}  # (i, j) -> the proxy replica i uses to reach replica j
        if proxied:
            from tcp_proxy import TcpProxy
            self.proxies = {(i, j): TcpProxy(f"127.0.0.1:{self.ports[j]}") for i in self.ports for j in self.ports if i != j}
        self.procs = {}
        for i in self.ports:
            if start_now is None or i in start_now:   # the others: start(i) later
                self.start(i)

    def peers_of(self, i):
        return ",".join(f"{j}={self.proxies[(i, j)].address if (i, j) in self.proxies else '127.0.0.1:' + str(p)}"
                        for j, p in self.ports.items())

    def cut(self, side_a, side_b):
        for a in side_a:
            for b in side_b:
                self.proxies[(a, b)].blackhole(True)
                self.proxies[(b, a)].blackhole(True)

    def heal(self):
        for p in self.proxies.values():
            p.blackhole(False)

    def addr(self, i):
        return f"127.0.0.1:{self.ports[i]}"

    def env_of(self, i):
        """Replica i's environment (None: this process's)."""
        return None

    def start(self, i):
        log = open(self.tmp / f"replica{i}.log", "ab")
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "logservice", "serve", "--raft", "--id", str(i), "--peers", self.peers_of(i),
             "--listen", self.addr(i), "--dir", str(self.tmp / f"r{i}"), "--tick", TICK, "--stats-interval", "0",
             *self.extra],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp, env=self.env_of(i))

    def start_joiner(self, i):
        """Start replica i on a new port with --join: it waits to be added as a learner."""
        self.ports[i] = free_ports(1)[0]
        peers = ",".join(f"{j}=127.0.0.1:{p}" for j, p in self.ports.items())
        log = open(self.tmp / f"replica{i}.log", "ab")
        self.procs[i] = subprocess.Popen(
            [LOGTIDE, "logservice", "serve", "--raft", "--join", "--id", str(i), "--peers", peers,
             "--dir", str(self.tmp / f"r{i}"), "--tick", TICK, "--stats-interval", "0"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp)

    def wait_caught_up(self, i, timeout=30.0):
        """Until replica i applied to within 10 entries of the leader's commit (a learner before it
        is promoted)."""
        end = time.monotonic() + timeout
        while True:
            lead = self.leader()
            if self.status(i)["applied"] >= self.status(lead)["commit"] - 10:
                return lead
            assert time.monotonic() < end, f"replica {i} did not catch up"
            time.sleep(0.05)

    def kill(self, i):
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    def status(self, i, timeout=0.5):
        from logtide.engine.logservice import replicated_pb2 as pb
        from logtide.engine.logservice.replicated import REPLICATED_SERVICE
        from logtide.engine.nodehost.channel import connect_replica
        import json
        c = connect_replica(REPLICATED_SERVICE, self.addr(i), timeout=timeout)
        try:
            return json.loads(c.invoke("Status", pb.REmpty()).json)
        finally:
            c.close()

    def leader(self, deadline=30.0):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for i in list(self.procs):
                try:
                    if self.status(i).get("role") == "leader":
                        return i
                except LogtideError:
                    pass
            time.sleep(0.05)
        raise AssertionError("no leader within the deadline")

    def stop(self):
        for p in self.proxies.values():
            p.close()
        for i in list(self.procs):
            self.procs[i].send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def _sigkill_rounds(cluster):
    def faults():
        rounds = ["leader"] * 6 + ["follower"] * 6 + ["all"] * 3
        for kind in rounds:
            time.sleep(0.4)
            lead = cluster.leader()
            victims = {"leader": [lead], "follower": [next(i for i in cluster.procs if i != lead)],
                       "all": list(cluster.procs)}[kind]
            for v in victims:
                cluster.kill(v)
            time.sleep(0.2)
            for v in victims:
                cluster.start(v)

    _run_and_verify(cluster, faults)


def test_sigkill_rounds_lose_no_acknowledged_append(cluster):
    _sigkill_rounds(cluster)


def test_sigkill_rounds_with_mutual_tls_between_every_peer_and_client(tmp_path):
    """The same rounds and checks, with every replica and client on mutual TLS (the replicas get
    it through LOGTIDE_TLS_*, as `logtide --tls-*` sets it); a client the CA did not sign is refused."""
    from logtide.engine.rpc.tls import set_default
    from tls_certs import make_pki
    pki = make_pki(tmp_path / "pki")
    set_default(pki["node"])
    c = None
    try:
        c = Cluster(tmp_path)
        _sigkill_rounds(c)
        set_default(pki["rogue"])
        with pytest.raises(LogtideError) as refused:
            connect_logservice(",".join(c.addr(i) for i in c.procs), deadline=3.0, call_timeout=1.0).append(b"x")
        assert "TLS" in str(refused.value), refused.value
    finally:
        set_default(None)
        if c is not None:
            c.stop()


def test_partitions_through_a_blackholing_proxy(tmp_path):
    """Isolate the leader from both followers, then split one follower from the other two; each
    partition lasts several election timeouts, twice."""
    cluster = Cluster(tmp_path, proxied=True)

    def faults():
        for _ in range(2):
            time.sleep(0.5)
            lead = cluster.leader()
            term = cluster.status(lead)["term"]
            others = [i for i in cluster.ports if i != lead]
            cluster.cut([lead], others)
            end = time.monotonic() + 10
            while not any(_role(cluster, i)[0] == "leader" and _role(cluster, i)[1] > term for i in others):
                assert time.monotonic() < end, "the majority side elected no new leader"
                time.sleep(0.05)
            time.sleep(0.5)
            assert _role(cluster, lead)[0] != "leader", "the isolated leader did not step down (check-quorum)"
            cluster.heal()
            time.sleep(0.5)
            lead = cluster.leader()
            lone = next(i for i in cluster.ports if i != lead)
            cluster.cut([lone], [i for i in cluster.ports if i != lone])
            time.sleep(2.5)
            cluster.heal()

    try:
        _run_and_verify(cluster, faults)
    finally:
        cluster.stop()


def _role(cluster, i):
    """(role, term) of replica i, ("down", 0) when it does not answer."""
    try:
        st = cluster.status(i)
    except LogtideError:
        return "down", 0
    return st["role"], st["term"]


def _run_and_verify(cluster, faults):
    history = []  # [input, call, output, return]
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.monotonic()
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)

    def writer(w):
        c = connect_logservice(addrs, deadline=8.0, call_timeout=1.0)
        k = 0
        while not stop.is_set():
            payload = b"w%d-%d" % (w, k)
            k += 1
            op = [("append", payload), time.monotonic() - t0, UNKNOWN, INF]
            with lock:
                history.append(op)
            try:
                lsn = c.append(payload)
                op[2], op[3] = lsn, time.monotonic() - t0
            except NoLeaderError:
                pass  # timed out: may or may not have taken effect
        c.close()

    def other():
        c = connect_logservice(addrs, deadline=8.0, call_timeout=1.0)
        while not stop.is_set():
            for kind in ("read", "tso"):
                op = [("read", 1) if kind == "read" else ("tso", 3), time.monotonic() - t0, UNKNOWN, INF]
                with lock:
                    history.append(op)
                try:
                    if kind == "read":
                        recs, _n = c.read(1, 8 << 20)
                        out = tuple((r.lsn, r.payload) for r in recs)
                    else:
                        out = c.get_tso_timestamp(3)
                    op[2], op[3] = out, time.monotonic() - t0
                except NoLeaderError:
                    pass
            time.sleep(0.05)
        c.close()

    cluster.leader()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)] + [threading.Thread(target=other)]
    for t in threads:
        t.start()
    try:
        faults()
        cluster.leader()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)

    acked = {op[0][1]: op[2] for op in history if op[0][0] == "append" and op[2] is not UNKNOWN}
    assert len(acked) > 50, f"only {len(acked)} appends were acknowledged"
    # every replica converges on the same log
    lead, st = settled_leader(cluster)
    target = st["commit"]
    logs = replica_logs(cluster, target)
    assert logs[1] == logs[2] == logs[3], "replicas disagree about the log"
    by_payload = {}
    for lsn, payload in logs[1]:
        assert payload not in by_payload, f"{payload!r} stored twice (LSNs {by_payload[payload]} and {lsn})"
        by_payload[payload] = lsn
    for payload, lsn in acked.items():
        assert by_payload.get(payload) == lsn, f"acknowledged {payload!r} at LSN {lsn}, log has {by_payload.get(payload)}"
    ops = [Operation(0, i, c, o, r) for i, c, o, r in history]
    res = check_operations(LogModel(), ops)
    assert res.ok, f"the client history is not linearizable (longest prefix {len(res.partial)} ops)"


def test_fourth_replica_joins_is_promoted_and_an_old_one_is_removed_under_load(tmp_path):
    from logtide.engine.raft import ADD_LEARNER, ADD_VOTER, REMOVE
    cluster = Cluster(tmp_path)
    cluster.start_joiner(4)
    addrs = ",".join(cluster.addr(i) for i in (1, 2, 3))
    admin = connect_logservice(addrs, deadline=20.0)
    stop = threading.Event()
    acked = {}

    def writer(w):
        c = connect_logservice(addrs + "," + cluster.addr(4), deadline=10.0, call_timeout=1.0)
        k = 0
        while not stop.is_set():
            try:
                acked[b"m%d-%d" % (w, k)] = c.append(b"m%d-%d" % (w, k))
            except NoLeaderError:
                pass
            k += 1
        c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    try:
        cluster.leader()
        for t in threads:
            t.start()
        time.sleep(0.5)
        admin.change_membership(ADD_LEARNER, 4, cluster.addr(4))
        lead = cluster.wait_caught_up(4)  # the learner catches up before it may vote
        assert cluster.status(4)["role"] == "follower" and 4 in cluster.status(lead)["learners"]
        admin.change_membership(ADD_VOTER, 4)
        victim = next(i for i in (1, 2, 3) if i != cluster.leader())
        admin.change_membership(REMOVE, victim)
        time.sleep(0.5)
        cluster.kill(victim)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    try:
        lead, st = settled_leader(cluster)
        assert sorted(st["voters"]) == sorted({1, 2, 3, 4} - {victim})
        target = st["commit"]
        logs = {}
        for i in st["voters"]:
            end = time.monotonic() + 30
            while cluster.status(i)["applied"] < target and time.monotonic() < end:
                time.sleep(0.05)
            c = connect_logservice(cluster.addr(i) + ",", deadline=10.0)
            recs, _n = c.read(1, 8 << 20, stale=True)
            c.close()
            logs[i] = [(r.lsn, r.payload) for r in recs if r.lsn <= target]
        first = logs[st["voters"][0]]
        assert all(v == first for v in logs.values())
        got = dict((p, l) for l, p in first)
        assert len(got) == len(first) and len(acked) > 20
        bad = {p: (lsn, got.get(p)) for p, lsn in acked.items() if got.get(p) != lsn}
        assert not bad, (f"{len(bad)} acknowledged appends are not at their LSN (payload: (acked, in the log)): "
                         f"{dict(list(bad.items())[:8])}; log of {len(first)} records ends at "
                         f"{first[-1][0] if first else None}, commit {target}")
    finally:
        admin.close()
        cluster.stop()


def test_a_replica_down_past_compaction_catches_up_through_a_snapshot(tmp_path):
    cluster = Cluster(tmp_path, extra=["--snapshot-entries", "50", "--compact-keep", "5",
                                       "--segment-size", "4096"])
    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    c = connect_logservice(addrs, deadline=20.0)
    try:
        cluster.leader()
        for k in range(20):
            c.append(b"early-%d" % k)
        lead = cluster.leader()
        down = next(i for i in cluster.ports if i != lead)
        cluster.kill(down)
        lsns = [c.append(b"later-%d" % k) for k in range(300)]
        c.truncate(lsns[250])  # the log may now be compacted up to here on every live replica
        for k in range(60):
            c.append(b"more-%d" % k)
        lead = cluster.leader()
        first = cluster.status(lead)["first_index"]
        assert first > 25, f"the leader did not compact its log (first index {first})"
        cluster.start(down)
        end = time.monotonic() + 30
        target = cluster.status(lead)["commit"]
        while True:
            try:
                st = cluster.status(down)
                if st["applied"] >= target:
                    break
            except LogtideError:
                pass
            assert time.monotonic() < end, "the restarted replica did not catch up"
            time.sleep(0.05)
        assert st["first_index"] > 25  # it starts from the snapshot, not from entry 1
        r = connect_logservice(cluster.addr(down) + ",", deadline=10.0)
        recs, _n = r.read(st["first_index"], 8 << 20, stale=True)
        r.close()
        assert recs[-1].payload == b"more-59"
        assert [x.lsn for x in recs] == [x.lsn for x in c.read(st["first_index"], 8 << 20)[0]]
        assert c.get_truncated_lsn() == lsns[250]
    finally:
        c.close()
        cluster.stop()


def test_bad_raft_input_is_refused_and_the_group_stays_up(cluster):
    """Malformed messages, non-members, forged senders, stale terms and CRC failures on the wire go
    to a live replica: each is refused with a logged reason, no replica crashes, nothing wrong commits."""
    from logtide.engine.raft import messages as M
    from logtide.engine.raft import raft_pb2 as rpb
    from logtide.engine.raft.messages import Entry, Message
    from logtide.engine.nodehost.transport import RAFT_SERVICE
    from logtide.engine.nodehost.channel import connect_replica
    from logtide.engine.raft.wire import encode_message

    addrs = ",".join(cluster.addr(i) for i in cluster.ports)
    c = connect_logservice(addrs, deadline=20.0)
    before = [c.append(b"ok-%d" % k) for k in range(5)]
    # every replica up and following the leader in its term: a replica still starting (slow under
    # load) is at the bootstrap term, where the "stale" message below is not stale but forged in
    # its own term, which no transport without authentication can tell apart (that case has a
    # test of its own below)
    lead, term = _all_follow(cluster, before[-1])
    assert term >= 2, f"the leader's term {term} leaves no older term for the stale message"
    victim = next(i for i in cluster.ports if i != lead)
    last = cluster.status(victim)["last_index"]
    evil = Entry(term, last + 1, M.ENTRY_NORMAL, b"A" + b"\0" * 20 + b"evil")
    app = encode_message(Message(M.APP, to=victim, frm=lead, term=term, index=last, log_term=term, entries=[evil],
                                 commit=last + 1))
    broken = rpb.RaftMessage()
    broken.CopyFrom(app)
    broken.entries[0].data = b"A" + b"\0" * 20 + b"EVIL"           # CRC no longer matches
    unknown = rpb.RaftMessage()
    unknown.CopyFrom(app)
    unknown.type = 99
    stale = encode_message(Message(M.APP, to=victim, frm=lead, term=term - 1, index=last, log_term=term - 1,
                                   entries=[Entry(term - 1, last + 1, 0, b"stale")], commit=last + 1))
    batches = [
        rpb.RaftBatch(cluster=99, frm=lead, messages=[app]),          # another group
        rpb.RaftBatch(cluster=1, frm=42, messages=[app]),             # not a member
        rpb.RaftBatch(cluster=1, frm=lead, messages=[broken]),        # CRC fails on the wire
        rpb.RaftBatch(cluster=1, frm=lead, messages=[unknown]),       # malformed
        rpb.RaftBatch(cluster=1, frm=next(i for i in cluster.ports if i not in (lead, victim)),
                      messages=[app]),                                  # forged sender
        rpb.RaftBatch(cluster=1, frm=lead, messages=[stale]),         # a stale term
    ]
    raft = connect_replica(RAFT_SERVICE, cluster.addr(victim), timeout=10)
    for b in batches:
        raft.Send(b)
    raft.close()
    time.sleep(0.5)
    after = [c.append(b"ok2-%d" % k) for k in range(5)]
    assert all(p.poll() is None for p in cluster.procs.values()), "a replica crashed on bad input"
    for i in cluster.ports:
        r = connect_logservice(cluster.addr(i) + ",", deadline=10.0)
        end = time.monotonic() + 30      # the bound replica_logs gives every Raft kill test
        while (st := cluster.status(i))["applied"] < after[-1]:
            role = "the victim" if i == victim else "the leader" if i == lead else "the third"
            assert time.monotonic() < end, (
                f"replica {i} ({role}) applied only to {st['applied']} of {after[-1]} in 30 s: {st}\n"
                + (cluster.tmp / f"replica{i}.log").read_text()[-3000:])
            time.sleep(0.05)
        recs, _n = r.read(1, 8 << 20, stale=True)
        r.close()
        payloads = [x.payload for x in recs]
        assert b"evil" not in b"".join(payloads) and b"EVIL" not in b"".join(payloads) and b"stale" not in payloads
        assert [x.lsn for x in recs if x.payload.startswith(b"ok")] == before + after, \
            f"replica {i} read {len(recs)} records from LSN 1 (its status: {st})"
    log = (cluster.tmp / f"replica{victim}.log").read_text()
    for reason in ("group 99", "node 42", "failed its CRC", "unknown Raft message type", "claiming node"):
        assert reason in log, f"no logged reason containing {reason!r}"
    c.close()


def _all_follow(cluster, lsn, deadline=30.0):
    """(leader, term) once every replica answers, follows one leader in that term and has applied lsn."""
    end = time.monotonic() + deadline
    while True:
        try:
            sts = {i: cluster.status(i) for i in cluster.ports}
        except LogtideError as exc:    # a replica still starting
            sts = {"error": repr(exc)}
        else:
            seen = {(s["lead"], s["term"]) for s in sts.values()}
            if len(seen) == 1:
                lead, term = seen.pop()
                if sts.get(lead, {}).get("role") == "leader" and all(s["applied"] >= lsn for s in sts.values()):
                    return lead, term
        assert time.monotonic() < end, f"the replicas did not all follow one leader and apply {lsn}: {sts}"
        time.sleep(0.05)


def _start_and_wait(cluster, i, end):
    """Start replica i; its status once it answers (by `end`)."""
    cluster.start(i)
    while True:
        try:
            return cluster.status(i)
        except LogtideError:
            assert time.monotonic() < end, f"replica {i} did not start"
            time.sleep(0.02)


def test_a_replica_whose_committed_log_conflicts_with_its_leaders_stops_and_says_why(tmp_path):
    """A message forged in a replica's own term, before it has heard from the leader, makes it commit
    an entry the leader's log does not have (plaintext peers are not authenticated; Raft trusts its
    peers). No message can mend a committed log: the leader used to probe below the replica's commit
    index forever (thousands of Readies, nothing applied, nothing said). The replica's Raft node now
    stops on DivergedLog, logged and shown in its status; its calls fail typed; the others serve on."""
    from logtide.engine.raft import messages as M
    from logtide.engine.raft import raft_pb2 as rpb
    from logtide.engine.raft.messages import Entry, Message
    from logtide.engine.nodehost.transport import RAFT_SERVICE
    from logtide.engine.nodehost.channel import connect_replica
    from logtide.engine.raft.wire import encode_message

    c = Cluster(tmp_path, proxied=True, start_now=(1, 2))
    try:
        c.cut([3], [1, 2])                 # replica 3 hears from nobody until the forgery is in
        lead = c.leader()
        client = connect_logservice(f"{c.addr(1)},{c.addr(2)}", deadline=20.0)
        acked = [client.append(b"ok-%d" % k) for k in range(5)]
        end = time.monotonic() + 30
        st = _start_and_wait(c, 3, end)
        assert st["lead"] == 0 and st["term"] < c.status(lead)["term"], st   # isolated since its start
        t, last = st["term"], st["last_index"]
        forged = encode_message(Message(M.APP, to=3, frm=lead, term=t, index=last, log_term=t,
                                        entries=[Entry(t, last + 1, M.ENTRY_NORMAL, b"forged")], commit=last + 1))
        raft = connect_replica(RAFT_SERVICE, c.addr(3), timeout=10)
        raft.Send(rpb.RaftBatch(cluster=1, frm=lead, messages=[forged]))
        raft.close()
        while c.status(3)["commit"] < last + 1:
            assert time.monotonic() < end, "replica 3 did not commit the forged entry"
            time.sleep(0.02)
        c.heal()
        while "failed" not in (st := c.status(3)):
            assert time.monotonic() < end, f"replica 3 did not stop on the conflict: {st}"
            time.sleep(0.05)
        assert st["failed"].startswith("DivergedLog") and st["applied"] == last + 1, st
        while "DivergedLog" not in (text := (tmp_path / "replica3.log").read_text()):   # logged just after
            assert time.monotonic() < end, f"replica 3 did not log why it stopped: {text[-2000:]}"
            time.sleep(0.05)
        alone = connect_logservice(c.addr(3) + ",", deadline=2.0)
        with pytest.raises(LogtideError):
            alone.append(b"to a stopped replica")
        alone.close()
        assert c.procs[3].poll() is None, "the stopped replica's process exited"
        more = [client.append(b"ok2-%d" % k) for k in range(5)]     # the quorum of 1 and 2 serves on
        assert more[0] > acked[-1]
        client.close()
    finally:
        c.stop()


class _NamedCluster(Cluster):
    """Every replica on mutual TLS with a certificate that names its Raft id, and peer ids checked
    (`--tls-peer-ids`, here through LOGTIDE_TLS_*)."""

    def __init__(self, tmp_path, pki, **kw):
        self.pki = pki
        super().__init__(tmp_path, **kw)

    def env_of(self, i):
        cfg = self.pki[f"raft{i}"]
        return dict(os.environ, LOGTIDE_TLS_CA=cfg.ca, LOGTIDE_TLS_CERT=cfg.cert, LOGTIDE_TLS_KEY=cfg.key,
                    LOGTIDE_TLS_PEER_IDS="1")


@contextlib.contextmanager
def _named_cluster(tmp_path, pki, **kw):
    """A _NamedCluster, this process's calls on the client certificate; stopped, and the process
    default reset, at the end."""
    from logtide.engine.rpc.tls import set_default
    set_default(pki["client"])
    c = None
    try:
        c = _NamedCluster(tmp_path, pki, **kw)
        yield c
    finally:
        set_default(None)
        if c is not None:
            c.stop()


def _send_forged(c, to, frm, st, tls, group=1) -> int:
    """Send replica `to` an APP claiming to come from node `frm`, one entry past its log (`st`, its
    status), over a connection on certificate `tls`; returns how many messages it took. The process
    default goes back to the client certificate after."""
    from logtide.engine.raft import messages as M
    from logtide.engine.raft import raft_pb2 as rpb
    from logtide.engine.raft.messages import Entry, Message
    from logtide.engine.nodehost.transport import RAFT_SERVICE
    from logtide.engine.nodehost.channel import connect_replica
    from logtide.engine.raft.wire import encode_message
    from logtide.engine.rpc.tls import set_default
    t, last = st["term"], st["last_index"]
    forged = encode_message(Message(M.APP, to=to, frm=frm, term=t, index=last, log_term=t,
                                    entries=[Entry(t, last + 1, M.ENTRY_NORMAL, b"forged")], commit=last + 1))
    set_default(tls)
    try:
        raft = connect_replica(RAFT_SERVICE, c.addr(to), timeout=10)
        try:
            return raft.Send(rpb.RaftBatch(cluster=group, frm=frm, messages=[forged])).messages
        finally:
            raft.close()
    finally:
        set_default(c.pki["client"])


def _no_forgery(recs, acked, more) -> None:
    """The log holds every acknowledged append in order, and not the forged entry."""
    payloads = [r.payload for r in recs]
    assert b"forged" not in payloads and all(b"ok-%d" % k in payloads for k in range(5)), payloads
    assert acked[-1] < more[0]


def test_with_peer_ids_a_certificate_cannot_speak_for_another_member(tmp_path):
    """The forgery of the test above, on a cluster whose certificates name their Raft ids: sent with
    a client's certificate (signed by the same CA, naming no node) and with another member's, it is
    refused on receipt, so the isolated replica commits nothing; once healed it follows the leader."""
    from tls_certs import make_raft_pki

    pki = make_raft_pki(tmp_path / "pki", (1, 2, 3))
    with _named_cluster(tmp_path, pki, proxied=True, start_now=(1, 2)) as c:
        c.cut([3], [1, 2])
        lead = c.leader()
        client = connect_logservice(f"{c.addr(1)},{c.addr(2)}", deadline=20.0)
        acked = [client.append(b"ok-%d" % k) for k in range(5)]
        end = time.monotonic() + 30
        st = _start_and_wait(c, 3, end)
        assert st["lead"] == 0 and st["term"] < c.status(lead)["term"], st
        last = st["last_index"]
        other = next(i for i in (1, 2) if i != lead)
        for sender in ("client", f"raft{other}"):
            taken = _send_forged(c, 3, lead, st, pki[sender])
            assert taken == 0, f"replica 3 took a batch claiming node {lead} with {sender}'s certificate"
        log3 = tmp_path / "replica3.log"
        while (text := log3.read_text()).count("certificate names") < 2:
            assert time.monotonic() < end, f"replica 3 did not log both refusals: {text[-2000:]}"
            time.sleep(0.05)
        assert f"names logtide:raft:{other}, not logtide:raft:{lead}" in text and "names no URI" in text
        st = c.status(3)
        assert st["commit"] < last + 1 and "failed" not in st, st
        c.heal()
        more = [client.append(b"ok2-%d" % k) for k in range(5)]
        while (st := c.status(3))["applied"] < more[-1]:
            assert time.monotonic() < end, f"replica 3 did not follow the leader once healed: {st}"
            time.sleep(0.05)
        assert "failed" not in st and c.procs[3].poll() is None
        alone = connect_logservice(c.addr(3) + ",", deadline=10.0)
        recs, _ = alone.read(1, 8 << 20, stale=True)
        alone.close()
        _no_forgery(recs, acked, more)
        client.close()


def test_peer_ids_bound_to_a_group_refuse_a_node_of_another_group(tmp_path):
    """Replicas run with --group 5 and certificates naming logtide:raft:5:<id>: they elect a leader
    and take appends. A batch claiming to come from the leader, sent with the certificate of the
    leader's id in group 6 (same CA), is refused and logged, and nothing of it is applied."""
    from tls_certs import make_raft_pki

    pki = make_raft_pki(tmp_path / "pki", (1, 2, 3), group=5, foreign_group=6)
    with _named_cluster(tmp_path, pki, extra=("--group", "5")) as c:
        lead = c.leader()
        client = connect_logservice(",".join(c.addr(i) for i in (1, 2, 3)), deadline=20.0)
        acked = [client.append(b"ok-%d" % k) for k in range(5)]
        follower = next(i for i in (1, 2, 3) if i != lead)
        taken = _send_forged(c, follower, lead, c.status(follower), pki[f"foreign{lead}"], group=5)
        assert taken == 0, "a certificate of group 6 spoke for a member of group 5"
        log = tmp_path / f"replica{follower}.log"
        end = time.monotonic() + 30
        want = f"names logtide:raft:6:{lead}, not logtide:raft:{lead} (nor logtide:raft:5:{lead})"
        while want not in (text := log.read_text()):
            assert time.monotonic() < end, f"the refusal was not logged: {text[-2000:]}"
            time.sleep(0.05)
        more = [client.append(b"ok2-%d" % k) for k in range(5)]
        recs, _ = client.read(1, 8 << 20)
        _no_forgery(recs, acked, more)
        client.close()


def test_peers_with_bound_ids_survive_sigkill_rounds_and_a_stopped_follower(tmp_path):
    """The 15 SIGKILL rounds and their checks on replicas whose certificates name their Raft ids, with
    peer ids checked: each restarted replica is taken back over its new connections. Then a
    follower is SIGSTOPped: appends go on through the other two (each within its deadline), and
    thawed it applies everything the leader committed."""
    from logtide.engine.rpc.tls import set_default
    from tls_certs import make_raft_pki
    pki = make_raft_pki(tmp_path / "pki", (1, 2, 3))
    set_default(pki["client"])
    c = None
    try:
        c = _NamedCluster(tmp_path, pki)
        _sigkill_rounds(c)
        lead = c.leader()
        frozen = next(i for i in c.procs if i != lead)
        client = connect_logservice(",".join(c.addr(i) for i in c.procs), deadline=10.0, call_timeout=2.0)
        freeze(c.procs[frozen].pid)
        try:
            t0 = time.monotonic()
            during = [client.append(b"while-stopped-%d" % k) for k in range(20)]
            assert time.monotonic() - t0 < 20, "appends waited on the stopped follower"
        finally:
            c.procs[frozen].send_signal(signal.SIGCONT)
        end = time.monotonic() + 30
        while (st := c.status(frozen))["applied"] < during[-1]:
            assert time.monotonic() < end, f"the thawed follower did not catch up: {st}"
            time.sleep(0.05)
        logs = "".join((tmp_path / f"replica{i}.log").read_text() for i in c.procs)
        assert "certificate names" not in logs, "a member's own batches were refused"
        client.close()
    finally:
        set_default(None)
        if c is not None:
            c.stop()


def test_status_command_prints_every_replica(cluster):
    cluster.leader()
    out = subprocess.run([LOGTIDE, "logservice", "status", *(cluster.addr(i) for i in cluster.ports), "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60, cwd=cluster.tmp)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and len(lines) == 4, out.stdout + out.stderr
    assert all("term" in l and "commit" in l and "applied" in l and "lag" in l for l in lines[:3])
    assert "unreachable" in lines[3]
    import json
    out = subprocess.run([LOGTIDE, "logservice", "status", "--json", *(cluster.addr(i) for i in cluster.ports)],
                         capture_output=True, text=True, timeout=60, cwd=cluster.tmp)
    rows = [json.loads(l) for l in out.stdout.splitlines()]
    assert [r["role"] for r in rows].count("leader") == 1 and {r["id"] for r in rows} == {1, 2, 3}


def test_tso_comes_from_a_leased_window_and_stays_increasing_across_a_leader_kill(cluster):
    """Many TSO calls cost one Raft entry (the leader's window); after the leader is SIGKILLed, the
    new leader's ranges lie above everything handed out before, and no range overlaps another."""
    from logtide.engine.logservice.replicated import TSO_WINDOW
    c = connect_logservice(",".join(cluster.addr(i) for i in cluster.ports), deadline=20.0)
    try:
        lead = cluster.leader()
        c.get_tso_timestamp(1)  # the first window
        before = cluster.status(lead)["last_index"]
        ranges = [(c.get_tso_timestamp(3), 3) for _ in range(300)]
        assert cluster.status(lead)["last_index"] - before <= 900 // TSO_WINDOW + 1
        cluster.kill(lead)
        ranges += [(c.get_tso_timestamp(5), 5) for _ in range(50)]
        assert cluster.leader() != lead
        firsts = [f for f, _n in ranges]
        assert firsts == sorted(firsts)
        for (f1, n1), (f2, _n2) in zip(ranges, ranges[1:]):
            assert f1 + n1 <= f2, f"TSO ranges overlap: [{f1}, {f1 + n1}) and {f2}"
        big = c.get_tso_timestamp(TSO_WINDOW)  # beyond the window: one Raft command of its own
        assert big >= ranges[-1][0] + ranges[-1][1]
    finally:
        c.close()


def test_a_truncate_whose_answer_was_lost_succeeds_on_its_retry(cluster):
    """The leader commits a truncate but its answer never reaches the client (a proxy holds the
    replies): the client's retry finds its own truncation done and returns, where it used to fail
    with InvalidTruncateLsn (the meta-service's snapshot hit this when its log's leader froze).
    Truncating to or below the truncated LSN on purpose is still refused."""
    from tcp_proxy import TcpProxy
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    from logtide.errors import InvalidTruncateLsn
    lead = cluster.leader()
    proxy = TcpProxy(cluster.addr(lead))
    c = ReplicatedLogServiceClient([proxy.address] + [cluster.addr(i) for i in cluster.ports],
                                   deadline=20.0, call_timeout=1.0)
    try:
        lsns = [c.append(b"r%d" % i) for i in range(10)]   # through the proxy, answers flowing
        proxy.mute_replies(True)
        c.truncate(lsns[5])                                 # lands; its answer is held; retried
        assert c.get_truncated_lsn() == lsns[5]
        with pytest.raises(InvalidTruncateLsn):
            c.truncate(lsns[5])
        with pytest.raises(InvalidTruncateLsn):
            c.truncate(lsns[2])
        c.truncate(lsns[8])
        assert c.get_truncated_lsn() == lsns[8]
    finally:
        c.close()
        proxy.close()


def test_framed_appends_whose_answer_was_lost_or_whose_leader_froze(cluster):
    """The client's framed appends (their requests serialized in C): one whose answer a proxy holds
    is retried through the other replicas and gets the LSN its record already has, stored once.
    With the leader SIGSTOPped, a client that can reach only it ends each append in NoLeaderError
    within its deadline; one that names every replica follows the new leader, and the thawed old
    leader catches up."""
    from tcp_proxy import TcpProxy
    from frozen import thaw
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    lead = cluster.leader()
    proxy = TcpProxy(cluster.addr(lead))
    c = ReplicatedLogServiceClient([proxy.address] + [cluster.addr(i) for i in cluster.ports],
                                   deadline=20.0, call_timeout=1.0)
    only = every = None
    try:
        first = c.append(b"before", replica_id=7)           # through the proxy, answers flowing
        proxy.mute_replies(True)
        t0 = time.monotonic()
        lost = c.append(b"lost-answer", replica_id=7)       # lands; its answer is held; retried
        assert time.monotonic() - t0 >= 1.0, "the held answer was not waited for: nothing was retried"
        assert lost > first
        recs, _ = c.read(first, 1 << 20)
        mine = [(r.lsn, r.payload) for r in recs if r.type == USER_RECORD and r.payload == b"lost-answer"]
        assert mine == [(lost, b"lost-answer")], "a retried append was stored twice or elsewhere"
        proxy.close()

        lead = cluster.leader()
        only = ReplicatedLogServiceClient([cluster.addr(lead)], deadline=3.0, call_timeout=0.5)
        every = ReplicatedLogServiceClient([cluster.addr(i) for i in cluster.ports], deadline=20.0,
                                           call_timeout=1.0)
        only.append(b"warm")
        every.append(b"warm")
        freeze(cluster.procs[lead].pid)
        try:
            t0 = time.monotonic()
            with pytest.raises(NoLeaderError):
                only.append(b"to-a-frozen-leader")
            assert time.monotonic() - t0 < 3.0 + 2.0, "an append outlived its deadline"
            after = every.append(b"after-the-freeze")
        finally:
            thaw(cluster.procs[lead].pid)
        end = time.monotonic() + 30
        while cluster.status(lead)["applied"] < after:
            assert time.monotonic() < end, "the thawed leader did not catch up"
            time.sleep(0.05)
    finally:
        for x in (c, only, every):
            if x is not None:
                x.close()
        proxy.close()


def test_a_membership_change_whose_answer_was_lost_succeeds_on_its_retry(cluster):
    """A change that cannot succeed (adding a member twice, removing a stranger) fails at once with
    MembershipRefused, not after the client's whole deadline; one whose answer the proxy held is
    found done by the client's retry, which returns the membership's log index."""
    from tcp_proxy import TcpProxy
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    from logtide.engine.raft.errors import MembershipRefused
    from logtide.engine.raft.messages import ADD_LEARNER, REMOVE
    lead = cluster.leader()
    c = ReplicatedLogServiceClient([cluster.addr(i) for i in cluster.ports], deadline=20.0, call_timeout=1.0)
    proxy = TcpProxy(cluster.addr(lead))
    muted = ReplicatedLogServiceClient([proxy.address] + [cluster.addr(i) for i in cluster.ports],
                                       deadline=20.0, call_timeout=1.0)
    try:
        c.append(b"x")
        t0 = time.monotonic()
        with pytest.raises(MembershipRefused, match="already a member"):
            c.change_membership(ADD_LEARNER, lead, cluster.addr(lead))
        with pytest.raises(MembershipRefused, match="not a member"):
            c.change_membership(REMOVE, 9)
        assert time.monotonic() - t0 < 5
        muted.append(b"y")                      # the stream through the proxy is up
        proxy.mute_replies(True)
        idx = muted.change_membership(ADD_LEARNER, 4, "127.0.0.1:1")   # lands; its answer is held
        st = cluster.status(lead)
        assert 4 in st["learners"] and st["conf_index"] == idx
        with pytest.raises(MembershipRefused):
            muted.change_membership(ADD_LEARNER, 4, "127.0.0.1:1")
        assert c.change_membership(REMOVE, 4) > idx
        assert 4 not in cluster.status(lead)["learners"]
    finally:
        muted.close()
        c.close()
        proxy.close()


def test_lockstep_writers_while_both_followers_are_stopped(cluster):
    """8 lockstep writers on the leader, whose batching holds new proposals while earlier ones are
    pending (RaftNode._linger), when both followers are SIGSTOPped: nothing commits, and every append
    ends in a typed error within its deadline rather than waiting on the held batch. Thawed, the
    group takes appends again, and every acknowledged append reads back with its own data."""
    from logtide.engine.logservice.replicated_client import ReplicatedLogServiceClient
    lead = cluster.leader()
    addrs = [cluster.addr(i) for i in cluster.ports]
    followers = [i for i in cluster.procs if i != lead]
    deadline = 3.0
    acked, failures, slow = {}, [], []
    stop = threading.Event()

    def writer(w):
        c = ReplicatedLogServiceClient(addrs, deadline=deadline, call_timeout=1.0)
        try:
            k = 0
            while not stop.is_set():
                data = b"w%d-%d" % (w, k)
                t0 = time.monotonic()
                try:
                    acked[c.append(data)] = data
                except Exception as exc:  # noqa: BLE001 - asserted typed below
                    failures.append(exc)
                if time.monotonic() - t0 > deadline + 5:
                    slow.append(time.monotonic() - t0)
                k += 1
        finally:
            c.close()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        before = len(acked)
        for i in followers:
            freeze(cluster.procs[i].pid)
        time.sleep(deadline * 2)
        during = len(acked)
        assert failures, "no append failed while no quorum could answer"
    finally:
        for i in followers:
            cluster.procs[i].send_signal(signal.SIGCONT)
    time.sleep(deadline)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert before > 0 and len(acked) > during, "the group took no appends after the thaw"
    assert not slow, slow                              # every call ended within its deadline (+ slack)
    assert all(isinstance(e, LogtideError) for e in failures), {type(e).__name__ for e in failures}
    c = ReplicatedLogServiceClient(addrs, deadline=20.0)
    try:
        got, lsn = {}, min(acked)
        last = max(acked)
        while lsn <= last:
            recs, nxt = c.read(lsn, 1 << 20)
            for r in recs:
                got[r.lsn] = r.data
            assert nxt > lsn
            lsn = nxt
        for lsn, data in acked.items():
            assert got.get(lsn, b"").endswith(data), lsn   # user records carry a header before the data
    finally:
        c.close()
