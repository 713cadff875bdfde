"""HAKeeper as a Raft group of three real processes (`logtide hakeeper serve`, DiskStorage files,
peers and clients on loopback): the leader ticks and runs the checkers itself; a world of stores
(tests/hakeeper_world.py) registers and heartbeats over RPC and carries out the schedule commands
the replies deliver; the HAKeeper leader is SIGKILLed in the middle of a repair and another replica
takes over: ticks go on and never go back, no command is lost or delivered twice, and the
survivors hold the same state. Bad input gets typed errors and HAKeeper keeps running; the
heartbeat senders of every role register, beat and register again when HAKeeper forgets them."""
import time

import pytest

from frozen import freeze
from hakeeper_procs import HAKeeperProcs
from hakeeper_world import World

from logtide.engine.hakeeper import (CNHeartbeat, ClusterInfo, CommandType, LogStoreHeartbeat, PrimaryHeartbeat,
                                     RegisterStore, RoHeartbeat, StoreRole, TNHeartbeat, Tick, encode_command)
from logtide.engine.hakeeper.heartbeat_sender import HeartbeatSender
from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.hakeeper.hakeeper_service import HAKEEPER_SERVICE
from logtide.engine.rpc import connect
from logtide.errors import (ConnectionRefused, HAKeeperNotLeader, HAKeeperUnavailable, MalformedCommandError,
                            MalformedHeartbeatError, UnknownStoreError)

C = CommandType
STEP = 0.1   # one world step: HAKeeper's tick period


class ProcWorld(World):
    """The world, against HAKeeper's processes: the leader ticks and checks on its own; the world's
    stores propose through HAKeeperClient and step in real time."""

    def __init__(self, client, **kw):
        self.client = client
        self.ticks_seen = []   # (monotonic time, tick) of every status read
        super().__init__(**kw)

    def propose(self, cmd):
        if isinstance(cmd, Tick):
            return None   # HAKeeper's leader ticks
        return self.client.propose(encode_command(cmd))

    @property
    def state(self):
        st = self.client.status()
        self.ticks_seen.append((time.monotonic(), st["tick"]))
        return st

    def check(self):
        pass   # HAKeeper's leader runs the checkers

    def step(self):
        super().step()
        time.sleep(STEP)


@pytest.fixture
def group(tmp_path):
    g = HAKeeperProcs(tmp_path, extra=["--hakeeper-no-bootstrap"])
    yield g
    g.stop()


def _same_state(g, ids, tries=200):
    """Survivors' statuses at one applied index (they apply continuously: read until two match)."""
    keys = ("index", "tick", "term", "bootstrap", "stores", "shards", "queued", "in_flight", "truncation_lsn")
    with g.client(timeout=2.0) as c:
        for _ in range(tries):
            sts = [c.replica_status(g.addr(i)) for i in ids]
            if len({s["index"] for s in sts}) == 1:
                first = {k: sts[0][k] for k in keys}
                for s in sts[1:]:
                    assert {k: s[k] for k in keys} == first
                return first
            time.sleep(0.002)
    raise AssertionError("survivors never showed one applied index")


def test_three_replicas_tick_repair_and_survive_a_leader_sigkill(group):
    t0 = time.monotonic()
    first, st = group.leader()
    elected = time.monotonic() - t0
    client = group.client(timeout=3.0)
    w = ProcWorld(client, log_stores=4, tn_stores=1, cns=1, ros=1, cluster=ClusterInfo(log_shards=1, log_replicas=3))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        w.step()
        if w.now % 5 == 0:
            s = w.state
            if s["bootstrap"] == "RUNNING" and len(w.healthy_voters()) == 3 and w.tn_runners():
                break
    assert len(w.healthy_voters()) == 3 and w.tn_runners(), group.logs_tail()
    # the tick rate: 10 a second on the leader
    a_t, a_tick = w.ticks_seen[0]
    b_t, b_tick = w.ticks_seen[-1]
    rate = (b_tick - a_tick) / (b_t - a_t)
    assert 6 <= rate <= 11, rate
    # a log store dies; while HAKeeper repairs the shard, its leader is SIGKILLed
    sh = w.shards[1]
    victim = next(r for r, s in sh.voters.items() if r != sh.leader)
    w.set_up(sh.voters[victim], False)
    for _ in range(35):   # past the log store timeout (3 s): the learner is on its way
        w.step()
    old, st_old = group.leader()
    tick_before = st_old["tick"]
    t_kill = time.monotonic()
    group.kill(old)
    new, st_new = group.leader(exclude=(old,))
    while st_new["tick"] <= tick_before:
        st_new = client.status()
    takeover = time.monotonic() - t_kill
    assert new != old and st_new["tick"] > tick_before
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        w.step()
        if w.now % 5 == 0:
            w.state
            if len(w.healthy_voters()) == 3 and victim not in w.shards[1].voters:
                break
    assert len(w.healthy_voters()) == 3 and victim not in w.shards[1].voters, group.logs_tail()
    steps = [(c.kind, c.learner) for _t, _s, c in w.executed if c.kind in (C.ADD_REPLICA, C.REMOVE_REPLICA)]
    assert steps == [(C.ADD_REPLICA, True), (C.ADD_REPLICA, False), (C.REMOVE_REPLICA, False)], steps
    executed = [(s, c.kind, c.shard_id, c.replica_id, c.learner) for _t, s, c in w.executed]
    assert len(set(executed)) == len(executed), f"a schedule command was delivered twice: {executed}"
    ticks = [t for _m, t in w.ticks_seen]
    assert ticks == sorted(ticks), "HAKeeper's tick went back"
    survivors = [i for i in group.ports if i != old]
    state = _same_state(group, survivors)
    assert state["bootstrap"] == "RUNNING" and state["tick"] > tick_before
    client.close()
    print(f"\nHAKeeper: first leader after {elected:.2f} s; tick rate {rate:.1f}/s; takeover after SIGKILL of the "
          f"leader {takeover:.2f} s (tick {tick_before} -> {st_new['tick']}); repair steps {steps}")


def test_bad_input_gets_typed_errors_and_hakeeper_keeps_ticking(group):
    leader, st = group.leader()
    with group.client(timeout=3.0) as c:
        with pytest.raises(MalformedCommandError):
            c.propose(b"HK\x01\x63")
        with pytest.raises(MalformedCommandError):
            c.propose(b"not a command")
        with pytest.raises(MalformedCommandError):   # the leader's own commands are not a store's
            c.propose(encode_command(Tick()))
        with pytest.raises(UnknownStoreError):
            c.heartbeat(LogStoreHeartbeat("log-9"))
        with pytest.raises(UnknownStoreError):
            c.heartbeat(CNHeartbeat("cn-9", 1))
        c.register(StoreRole.RO, "ro-1", "127.0.0.1:1")
        with pytest.raises(MalformedHeartbeatError):   # min used above applied + 1
            c.propose(_impossible_ro())
        with pytest.raises(UnknownStoreError):          # registered as RO, beats as a CN
            c.heartbeat(CNHeartbeat("ro-1", 1))
        # a follower refuses, naming the leader (HAKeeperClient would follow it). On a loaded host a
        # follower may still be starting (its port refuses: the leader was elected by the other
        # two) or be between terms for a moment ("leader unknown"): ask again, within a deadline
        deadline = time.monotonic() + 30
        refused = None
        while True:
            leader, _ = group.leader()
            for follower in (i for i in group.ports if i != leader):
                try:
                    pinned = connect(HAKEEPER_SERVICE, group.addr(follower), carrier="wire", timeout=1.0)
                except ConnectionRefused:
                    continue
                try:
                    with pytest.raises(HAKeeperNotLeader) as refused:
                        pinned.invoke("Propose", command=encode_command(RegisterStore(StoreRole.CN, "cn-1", "x:1")))
                finally:
                    pinned.close()
                break
            if refused is not None and "leader unknown" not in str(refused.value):
                break
            assert time.monotonic() < deadline, f"no follower named the leader within 30 s: {refused}"
            time.sleep(0.2)
        assert f"leader at {group.addr(leader)}" in str(refused.value)
        t1 = c.status()["tick"]
        time.sleep(0.5)
        assert c.status()["tick"] >= t1 + 3
        assert c.register(StoreRole.CN, "cn-1", "x:1") > 0   # the client follows the leader
    t = time.monotonic()
    with HAKeeperClient("127.0.0.1:1", timeout=1.0, call_timeout=0.3) as dead:
        with pytest.raises(HAKeeperUnavailable):
            dead.status()
    assert time.monotonic() - t < 2.0


def _impossible_ro() -> bytes:
    """An RoHeartbeat whose min used LSN is above its applied LSN + 1, built byte by byte (the
    encoder refuses it): store id, consistent 5, applied 5, min used 9."""
    from logtide.engine.hakeeper import hakeeper_format as F
    w = F.Writer()
    w.string("ro-1")
    for v in (5, 5, 9):
        w.u64(v)
    return F.HEADER.pack(F.MAGIC, F.VERSION, F.RO_HEARTBEAT) + w.getvalue()


def test_heartbeat_senders_of_every_role_register_and_beat(group):
    group.leader()
    reports = {
        StoreRole.LOG: lambda: LogStoreHeartbeat("log-1"),
        StoreRole.TN: lambda: TNHeartbeat("tn-1", (), 7),
        StoreRole.CN: lambda: CNHeartbeat("cn-1", 3),
        StoreRole.PRIMARY: lambda: PrimaryHeartbeat("primary-1", 10, 8, 0),
        StoreRole.RO: lambda: RoHeartbeat("ro-1", 8, 9, 6),
    }
    senders = [HeartbeatSender(group.addrs(), role, fn().store_id, f"127.0.0.1:{9000 + int(role)}", fn, interval=0.2)
               for role, fn in reports.items()]
    senders[2].registered = True   # the CN believes it is registered: HAKeeper refuses, it registers again
    for s in senders:
        s.start()
    try:
        with group.client() as c:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                st = c.status()
                if all(s.sent >= 3 for s in senders) and len(st["stores"]) == 5:
                    break
                time.sleep(0.1)
            assert all(s.sent >= 3 for s in senders), [(s.store_id, s.sent, s.failed) for s in senders]
            assert senders[2].failed >= 1   # the refused beat
            for sid, v in st["stores"].items():
                assert v["heartbeated"] and not v["down"] and v["last_heartbeat_tick"] > 0, (sid, v)
            assert {v["role"] for v in st["stores"].values()} == {"log", "tn", "cn", "primary", "ro"}
    finally:
        for s in senders:
            s.stop()


def test_a_frozen_leader_is_replaced_and_steps_down_when_thawed(group):
    """SIGSTOP of HAKeeper's leader: every client call ends within its deadline (answered by the new
    leader, or a typed error), another replica ticks on; thawed, the old leader steps down, follows
    and catches up, and the tick it reports never goes back."""
    import os
    import signal
    old, st = group.leader()
    tick_before = st["tick"]
    freeze(group.procs[old].pid)
    try:
        with group.client(timeout=2.0) as c:
            answered, t_end = None, time.monotonic() + 20
            while time.monotonic() < t_end:
                t0 = time.monotonic()
                try:
                    s = c.status()
                except (HAKeeperUnavailable, HAKeeperNotLeader) as exc:   # typed, within the deadline
                    assert time.monotonic() - t0 < 2.0 + 1.5, exc
                    continue
                assert time.monotonic() - t0 < 2.0 + 1.5
                if s["role"] == "leader" and s["replica"] != old and s["tick"] > tick_before:
                    answered = s
                    break
            assert answered, group.logs_tail()
            c.register(StoreRole.CN, "cn-frozen-test", "127.0.0.1:1")     # writes go on without it
    finally:
        os.kill(group.procs[old].pid, signal.SIGCONT)
    with group.client(timeout=2.0) as c:
        end, last = time.monotonic() + 20, -1
        while time.monotonic() < end:
            try:
                s = c.replica_status(group.addr(old))
            except (HAKeeperUnavailable, HAKeeperNotLeader):
                time.sleep(0.1)
                continue
            assert s["tick"] >= last          # the thawed replica's tick never goes back
            last = s["tick"]
            if s["role"] != "leader" and s["tick"] > answered["tick"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the thawed leader did not step down and catch up\n" + group.logs_tail())
        leader, _ = group.leader()
        assert leader != old or c.status()["term"] > st["term"]


@pytest.mark.parametrize("survivor_leads", [True, False])
def test_status_is_never_a_replica_without_a_quorum(group, survivor_leads):
    """Two of three replicas SIGKILLed: the survivor (the leader, or a follower) can confirm no
    leadership, so `status()` (the leader's state after a ReadIndex barrier) ends in a typed error
    within its deadline instead of answering with the survivor's possibly stale state; the survivor's
    own `replica_status` still answers, as a replica's view."""
    lead, _ = group.leader()
    survivor = lead if survivor_leads else next(i for i in group.ports if i != lead)
    for i in [i for i in group.ports if i != survivor]:
        group.kill(i)
    with HAKeeperClient([group.addr(survivor)], timeout=2.0, call_timeout=1.0) as c:
        for _ in range(3):
            t0 = time.monotonic()
            with pytest.raises(HAKeeperUnavailable):
                c.status()
            assert time.monotonic() - t0 < 2.0 + 1.5
        assert c.replica_status(group.addr(survivor))["replica"] == survivor
    if survivor_leads:
        # its own periodic status line (every 10 s) reads the local view: no barrier that could fail
        # and end the process
        log = group.tmp / f"hakeeper{survivor}.log"
        lines = log.read_text().count("hakeeper: replica")
        end = time.monotonic() + 15
        while log.read_text().count("hakeeper: replica") == lines and time.monotonic() < end:
            time.sleep(0.2)
        assert log.read_text().count("hakeeper: replica") > lines, group.logs_tail()
        assert group.procs[survivor].poll() is None, group.logs_tail()
