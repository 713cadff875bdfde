"""HAKeeper's checkers as pure functions of the state: unit scenarios (a log replica lost and
repaired through learner → voter → removal, the leader removed last, missing replicas started,
zombies killed, the TN restarted, expired CNs and RO nodes dropped), hypothesis against an
independent model on random states, and hypothesis over stores going down, coming back and
flapping in a world of stores that carries the commands out."""
import io

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from hakeeper_model import expected, signature
from hakeeper_world import World
from logtide.engine.hakeeper import (ClusterInfo, CommandType, HAKeeperConfig, HAKeeperState, HAKeeperStateMachine,
                                     LogReplicaInfo, LogStoreHeartbeat, ScheduleCommand, StoreRole, TNHeartbeat, check)
from logtide.engine.hakeeper.cluster_info import BootstrapState
from logtide.engine.hakeeper.command import ScheduleCommandBatch
from logtide.engine.hakeeper.heartbeat import CNHeartbeat, RoHeartbeat
from logtide.engine.hakeeper.log_shard_state import LogShardState
from logtide.engine.hakeeper.store_state import StoreState
from logtide.errors import UnknownStoreError

C = CommandType


def booted(**kw) -> World:
    w = World(**kw)
    for _ in range(200):
        w.step()
        if w.state.bootstrap == BootstrapState.RUNNING and len(w.healthy_voters()) == 3 and w.tn_runners():
            return w
    raise AssertionError(f"the world did not bootstrap: {w.state.bootstrap}, {w.shards}")


def kinds(w: World, since: int = 0) -> list[tuple]:
    return [(t, c.kind, c.replica_id, c.learner) for t, _sid, c in w.executed if t >= since]


def test_bootstrap_starts_the_founders_on_distinct_stores_then_runs():
    w = booted()
    sh = w.shards[1]
    assert len(sh.voters) == 3 and len(set(sh.voters.values())) == 3
    starts = [c for _t, _s, c in w.executed if c.kind == C.START_REPLICA and c.members]
    assert len(starts) == 3 and {c.members for c in starts} == {tuple(sorted(sh.voters.items()))}
    assert w.state.bootstrap == BootstrapState.RUNNING
    # nothing else to do on a healthy cluster
    w.run(100)
    assert check(w.sm.lookup("state"), w.cfg) == [] and len(w.healthy_voters()) == 3 and not w.zombies()


def test_a_dead_replica_is_replaced_learner_then_voter_then_removed():
    w = booted()
    sh = w.shards[1]
    victim = next(r for r, s in sh.voters.items() if r != sh.leader)
    victim_store = sh.voters[victim]
    spare = next(s for s in ("log-1", "log-2", "log-3", "log-4") if s not in sh.voters.values())
    t0 = w.now
    w.set_up(victim_store, False)
    w.run(w.cfg.timeout_ticks(StoreRole.LOG) + 200)
    assert len(w.healthy_voters()) == 3 and victim not in sh.voters and spare in sh.voters.values()
    steps = kinds(w, t0)
    add = next(t for t, k, _r, learner in steps if k == C.ADD_REPLICA and learner)
    promote = next(t for t, k, _r, learner in steps if k == C.ADD_REPLICA and not learner)
    remove = next(t for t, k, r, _l in steps if k == C.REMOVE_REPLICA and r == victim)
    # the down rule, then learner, voter and removal, in that order
    assert add - t0 > w.cfg.timeout_ticks(StoreRole.LOG)
    assert add < promote < remove
    # the dead store comes back: its replica is a zombie now and is killed; nothing else changes
    w.set_up(victim_store, True)
    w.run(200)
    assert not w.zombies() and len(w.healthy_voters()) == 3
    assert any(c.kind == C.KILL_ZOMBIE and s == victim_store for _t, s, c in w.executed)


def test_the_leader_is_removed_last_and_never_while_another_voter_can_go():
    st = HAKeeperState(tick=10, bootstrap=BootstrapState.RUNNING, cluster=ClusterInfo(1, 2), next_replica_id=9)
    for i in range(1, 5):
        st.stores[f"log-{i}"] = StoreState(StoreRole.LOG, f"log-{i}", tick=10)
    voters = {1: "log-1", 2: "log-2", 3: "log-3"}
    st.shards[1] = LogShardState(1, epoch=4, term=2, leader_id=1, voters=dict(voters))
    for rid, sid in voters.items():
        st.stores[sid].report = LogStoreHeartbeat(sid, (LogReplicaInfo(1, rid, 2, 1, 4, 9, tuple(voters.items())),))
    cmds = check(st, HAKeeperConfig())
    assert [(c.kind, c.replica_id, c.target) for c in cmds] == [(C.REMOVE_REPLICA, 2, "log-1")]
    st.shards[1].leader_id = 2
    assert [c.replica_id for c in check(st, HAKeeperConfig())] == [1]


def test_no_membership_change_without_a_live_leader_or_with_one_in_flight():
    st = HAKeeperState(tick=1000, bootstrap=BootstrapState.RUNNING, cluster=ClusterInfo(1, 3), next_replica_id=9)
    cfg = HAKeeperConfig(log_store_timeout=1.0)
    for i in range(1, 5):
        st.stores[f"log-{i}"] = StoreState(StoreRole.LOG, f"log-{i}", tick=1000 if i != 1 else 0)
    voters = {1: "log-1", 2: "log-2", 3: "log-3"}
    st.shards[1] = LogShardState(1, epoch=4, term=2, leader_id=1, voters=dict(voters))
    for rid, sid in voters.items():
        st.stores[sid].report = LogStoreHeartbeat(sid, (LogReplicaInfo(1, rid, 2, 1, 4, 9, tuple(voters.items())),))
    assert not [c for c in check(st, cfg) if c.kind == C.ADD_REPLICA]   # leader log-1 is down
    st.shards[1].leader_id = 2
    cmds = check(st, cfg)
    assert [(c.kind, c.target, c.replica_store, c.learner, c.replica_id) for c in cmds] == [
        (C.ADD_REPLICA, "log-2", "log-4", True, 9)]
    st.in_flight[cmds[0].key()] = cmds[0]
    assert check(st, cfg) == []


def test_members_not_running_are_started_and_non_voting_replicas_get_their_variant():
    st = HAKeeperState(tick=5, bootstrap=BootstrapState.RUNNING, cluster=ClusterInfo(1, 2, non_voting_replicas=1),
                       next_replica_id=9)
    for i in range(1, 4):
        st.stores[f"log-{i}"] = StoreState(StoreRole.LOG, f"log-{i}", tick=5)
    st.shards[1] = LogShardState(1, epoch=3, term=1, leader_id=1, voters={1: "log-1", 2: "log-2"},
                                 learners={5: "log-3"}, non_voting={5})
    st.stores["log-1"].report = LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1, 1, 1, 3, 9, ((1, "log-1"),
                                                                                              (2, "log-2"))),))
    cmds = {(c.kind, c.target, c.replica_id) for c in check(st, HAKeeperConfig())}
    assert cmds == {(C.START_REPLICA, "log-2", 2), (C.START_NON_VOTING_REPLICA, "log-3", 5)}


def test_the_tn_is_restarted_on_a_working_store_and_duplicates_stopped():
    w = booted(tn_stores=2)
    first = w.tn_runners()
    assert len(first) == 1
    w.set_up(first[0], False)
    w.run(w.cfg.timeout_ticks(StoreRole.TN) + 60)
    assert w.tn_runners() and w.tn_runners() != first
    # the old TN store comes back still running its old replica: the older replica is stopped
    old = w.tn_running[first[0]]
    w.set_up(first[0], True)
    w.tn_running[first[0]] = {1: 1}     # (set_up cleared it; a store that kept running would report it)
    w.run(60)
    assert len(w.tn_runners()) == 1 and old == {}
    assert any(c.kind == C.STOP_TN for _t, _s, c in w.executed)


def test_the_only_tn_store_down_is_restarted_by_a_log_store_with_its_replica_id():
    w = booted(tn_stores=1)
    assert w.tn_runners() == ["tn-1"]
    rid = w.tn_running["tn-1"][1]
    w.run(20)
    assert w.state.stores["tn-1"].tn_shards() == {1: rid}   # HAKeeper heard it run the shard
    w.set_up("tn-1", False)
    w.run(w.cfg.timeout_ticks(StoreRole.TN) + 60)
    restarts = [(sid, c) for _t, sid, c in w.executed if c.kind == C.START_TN and sid.startswith("log-")]
    assert len(restarts) == 1, restarts          # issued once: in flight until tn-1 is heard from again
    sid, c = restarts[0]
    assert w.roles[sid] == StoreRole.LOG and c.replica_store == "tn-1" and c.replica_id == rid
    assert w.tn_runners() == ["tn-1"] and w.tn_running["tn-1"] == {1: rid}
    assert not [k for k in w.state.in_flight.values() if k.kind == C.START_TN]


def test_a_tn_restart_for_an_unknown_tn_store_is_refused():
    sm = HAKeeperStateMachine()
    st = sm.state
    st.cluster = ClusterInfo(log_shards=1, log_replicas=3, tn_shards=1)
    st.bootstrap = BootstrapState.RUNNING
    st.stores["log-1"] = StoreState(StoreRole.LOG, "log-1", "a", 0)
    with pytest.raises(UnknownStoreError):
        sm.apply(ScheduleCommandBatch(1, 0, (ScheduleCommand(C.START_TN, "log-1", 1, 1, "tn-9", expires_tick=9),)))
    assert not st.queued and not st.in_flight


def test_expired_cns_and_ro_nodes_are_dropped_and_rejoin_after_registering():
    w = booted(cns=2, ros=2)
    w.set_up("cn-1", False)
    w.set_up("ro-2", False)
    w.run(w.cfg.timeout_ticks(StoreRole.CN) + 30)
    assert "cn-1" not in w.state.stores and "ro-2" not in w.state.stores
    assert "cn-2" in w.state.stores and "ro-1" in w.state.stores
    w.set_up("ro-2", True)
    w.run(30)
    assert w.state.stores["ro-2"].report is not None


def test_check_is_a_pure_function_of_the_state():
    w = booted()
    w.check_every = 10**9   # the leader stops checking: the repair stays to be scheduled
    w.set_up("log-1", False)
    w.run(w.cfg.timeout_ticks(StoreRole.LOG) + 30)
    st = w.sm.lookup("state")
    a = check(st, w.cfg)
    assert a and a == check(st, w.cfg)
    buf = io.BytesIO()
    w.sm.save_snapshot(buf)
    sm2 = HAKeeperStateMachine()
    sm2.recover_from_snapshot(io.BytesIO(buf.getvalue()))
    assert check(sm2.lookup("state"), w.cfg) == a
    assert st == w.sm.lookup("state")   # checking changed nothing


# --- hypothesis: the checkers against the model, on random states -------------------------------------

CFG = HAKeeperConfig(log_store_timeout=2.0, tn_store_timeout=1.0, cn_store_timeout=1.0, ro_timeout=1.0,
                     promote_lag=5)


@st.composite
def states(draw):
    now = draw(st.integers(0, 60))
    tick = st.integers(0, now)
    cluster = ClusterInfo(draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(0, 1)), 1)
    s = HAKeeperState(tick=now, bootstrap=BootstrapState.RUNNING, cluster=cluster)
    logs = [f"log-{i}" for i in range(1, draw(st.integers(2, 6)) + 1)]
    for sid in logs:
        s.stores[sid] = StoreState(StoreRole.LOG, sid, tick=draw(tick))
    rid = 0
    reports: dict[str, list] = {sid: [] for sid in logs}
    for shard_id in cluster.log_shard_ids():
        hosts = draw(st.permutations(logs))
        nv = draw(st.integers(1, min(4, len(hosts))))
        nl = draw(st.integers(0, len(hosts) - nv))
        sh = LogShardState(shard_id, epoch=draw(st.integers(1, 6)), term=draw(st.integers(1, 4)))
        for sid in hosts[:nv]:
            rid += 1
            sh.voters[rid] = sid
        for sid in hosts[nv:nv + nl]:
            rid += 1
            sh.learners[rid] = sid
            if draw(st.booleans()):
                sh.non_voting.add(rid)
        sh.leader_id = draw(st.sampled_from([0] + sorted(sh.voters)))
        s.shards[shard_id] = sh
        members = {**sh.voters, **sh.learners}
        for sid in logs:
            what = draw(st.sampled_from(["member", "nothing", "zombie"]))
            mine = [r for r, h in members.items() if h == sid]
            if what == "member" and mine:
                reports[sid].append(LogReplicaInfo(shard_id, mine[0], sh.term, sh.leader_id,
                                                   draw(st.integers(0, sh.epoch)), draw(st.integers(0, 20)),
                                                   tuple(sorted(sh.voters.items()))))
            elif what == "zombie":
                rid += 1
                reports[sid].append(LogReplicaInfo(shard_id, rid, 1, 0, draw(st.integers(0, sh.epoch)), 0))
    for sid in logs:
        s.stores[sid].report = LogStoreHeartbeat(sid, tuple(reports[sid]))
    for i in range(draw(st.integers(0, 2))):
        sid = f"tn-{i + 1}"
        rid += 1
        shards = ((1, rid),) if draw(st.booleans()) else ()
        s.stores[sid] = StoreState(StoreRole.TN, sid, tick=draw(tick), report=TNHeartbeat(sid, shards))
    for i in range(draw(st.integers(0, 2))):
        s.stores[f"cn-{i}"] = StoreState(StoreRole.CN, f"cn-{i}", tick=draw(tick), report=CNHeartbeat(f"cn-{i}"))
        s.stores[f"ro-{i}"] = StoreState(StoreRole.RO, f"ro-{i}", tick=draw(tick), report=RoHeartbeat(f"ro-{i}"))
    s.next_replica_id = rid + 1
    # some commands in flight: what the checkers must not issue twice
    for _ in range(draw(st.integers(0, 2))):
        shard_id = draw(st.sampled_from(sorted(s.shards)))
        sh = s.shards[shard_id]
        r, h = draw(st.sampled_from(sorted({**sh.voters, **sh.learners}.items())))
        kind = draw(st.sampled_from([C.REMOVE_REPLICA, C.START_REPLICA, C.ADD_NON_VOTING_REPLICA, C.START_TN]))
        c = ScheduleCommand(kind, h, shard_id if kind != C.START_TN else 1, r, h, expires_tick=now + 5)
        s.in_flight[c.key()] = c
    return s


@given(states())
@scaled(300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_checkers_schedule_what_the_model_says(s):
    cmds = check(s, CFG)
    sigs = [signature(c, s) for c in cmds]
    assert len(sigs) == len(set(sigs)), "a command was scheduled twice in one round"
    assert set(sigs) == expected(s, CFG)
    # fresh ids (a TN store restarted by a log store keeps its replica id)
    fresh = [c.replica_id for c in cmds if (c.kind in (C.ADD_REPLICA, C.ADD_NON_VOTING_REPLICA) and c.learner)
             or (c.kind == C.START_TN and c.replica_store == c.target)]
    assert len(set(fresh)) == len(fresh) and all(r >= s.next_replica_id for r in fresh)
    # one membership change per shard per round
    per_shard = [c.shard_id for c in cmds if c.kind in (C.ADD_REPLICA, C.REMOVE_REPLICA, C.ADD_NON_VOTING_REPLICA,
                                                        C.REMOVE_NON_VOTING_REPLICA)]
    assert len(per_shard) == len(set(per_shard))


# --- hypothesis: stores going down, coming back and flapping --------------------------------------------

STORES = ["log-1", "log-2", "log-3", "log-4", "log-5", "tn-1", "tn-2"]


@st.composite
def schedules(draw):
    """(tick, store, up) events over a fault phase: single outages, returns, and flapping."""
    events = []
    for _ in range(draw(st.integers(1, 6))):
        sid = draw(st.sampled_from(STORES))
        at = draw(st.integers(0, 300))
        if draw(st.booleans()):   # flapping: down and up every few ticks
            period = draw(st.integers(3, 40))
            for k in range(draw(st.integers(2, 8))):
                events.append((at + k * period, sid, k % 2 == 1))
        else:
            events.append((at, sid, False))
            if draw(st.booleans()):
                events.append((at + draw(st.integers(1, 200)), sid, True))
    return sorted(events)


@given(schedules())
# found by this test: an add delivered just before its tick expired before the leader's next
# heartbeat showed the learner, and a second learner was added on the same store
@example(events=[(0, "log-1", False), (33, "log-3", False), (63, "log-3", True), (93, "log-3", False),
                 (104, "log-2", False), (144, "log-2", True)])
@scaled(25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_flapping_stores_heal_to_the_wanted_cluster_and_never_break_the_rules(events):
    w = booted(log_stores=5, tn_stores=2)
    pending, t0 = list(events), w.now
    while pending or w.now < t0 + 300:
        while pending and t0 + pending[0][0] <= w.now:
            _t, sid, up = pending.pop(0)
            w.set_up(sid, up)
        w.step()
        _invariants(w)
    # heal: everything up for longer than every timeout, then the cluster is what the info says
    for sid in STORES:
        w.set_up(sid, True)
    w.run(w.cfg.timeout_ticks(StoreRole.LOG) + 400)
    _invariants(w)
    sh = w.shards[1]
    assert len(w.healthy_voters()) == 3 and len(sh.voters) == 3, (sh, w.state.in_flight)
    assert not sh.learners and not w.zombies()
    assert len(w.tn_runners()) == 1
    assert check(w.sm.lookup("state"), w.cfg) == []


def _invariants(w: World) -> None:
    st = w.state
    flying = [c for c in st.in_flight.values() if c.kind in (C.ADD_REPLICA, C.REMOVE_REPLICA,
                                                             C.ADD_NON_VOTING_REPLICA, C.REMOVE_NON_VOTING_REPLICA)]
    assert len({c.shard_id for c in flying}) == len(flying), "two membership changes of a shard in flight"
    sh = w.shards[1]
    assert sh.voters, "the shard lost every voter"
    hosts = list(sh.voters.values()) + list(sh.learners.values())
    assert len(hosts) == len(set(hosts)), f"two replicas of the shard on one store: {sh}"
    ids = [c.replica_id for c in w.issued if (c.kind == C.ADD_REPLICA and c.learner)
           or (c.kind == C.START_TN and c.replica_store == c.target)]
    assert len(ids) == len(set(ids)), "a replica id was handed out twice"


def test_a_founder_whose_store_was_down_at_bootstrap_rejoins_when_it_comes_back():
    w = World(log_stores=3)
    w.set_up("log-3", False)
    w.run(20)
    # two founders of three run: Running (MatrixOne's rule); log-3's start is queued, undelivered
    assert w.state.bootstrap == BootstrapState.RUNNING
    assert "log-3" in w.shards[1].voters.values() and not w.running["log-3"]
    w.run(w.cfg.timeout_ticks(StoreRole.LOG) + 60)
    # no spare store: the dead founder is removed (the shard runs on two)
    assert sorted(w.shards[1].voters.values()) == ["log-1", "log-2"]
    w.set_up("log-3", True)
    w.run(100)
    assert len(w.healthy_voters()) == 3 and sorted(w.shards[1].voters.values()) == ["log-1", "log-2", "log-3"]
    issued = [c for c in w.issued if c.target == "log-3" and c.kind == C.START_REPLICA]
    assert issued[0].members   # the founders' start, which expired undelivered
    executed = [c for _t, s, c in w.executed if s == "log-3" and c.kind == C.START_REPLICA]
    assert executed and not executed[0].members and executed[0].replica_id not in dict(issued[0].members)


def test_a_founder_whose_store_never_comes_back_is_replaced_after_bootstrap():
    w = World(log_stores=4)
    w.set_up("log-3", False)   # log-3 is picked as a founder (least loaded, then by id), and stays down
    w.run(w.cfg.timeout_ticks(StoreRole.LOG) + 200)
    sh = w.shards[1]
    assert w.state.bootstrap == BootstrapState.RUNNING and len(w.healthy_voters()) == 3
    assert "log-3" not in sh.voters.values() and "log-4" in sh.voters.values()
