"""HAKeeper's state machine: ticks and the down rule, heartbeats and batch delivery, stale batches,
bootstrap exactly once (across replay and snapshots), the truncation hold, and bad input refused
with typed errors that leave the state as it was."""
import io

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.hakeeper import (CNHeartbeat, ClusterInfo, CommandType, HAKeeperConfig, HAKeeperStateMachine,
                                     InitialCluster, LogReplicaInfo, LogStoreHeartbeat, PrimaryHeartbeat,
                                     RegisterStore, RoHeartbeat, ScheduleCommand, ScheduleCommandBatch, StoreRole,
                                     TNHeartbeat, Tick, encode_command, leader_batch)
from logtide.engine.hakeeper.cluster_info import BootstrapState
from logtide.engine.hakeeper.state_machine import STALE_BATCH
from logtide.engine.statemachine import Entry
from logtide.errors import (CorruptHAKeeperSnapshot, HAKeeperError, MalformedCommandError, MalformedHeartbeatError,
                            UnknownReplicaError, UnknownStoreError)

C = CommandType


class Driver:
    """Applies commands as consecutive committed entries and keeps the log, for replays."""

    def __init__(self, sm=None):
        self.sm = sm or HAKeeperStateMachine()
        self.log: list[bytes] = []

    def __call__(self, cmd):
        data = cmd if isinstance(cmd, bytes) else encode_command(cmd)
        self.log.append(data)
        return self.sm.update(Entry(len(self.log), data))

    def ticks(self, n):
        for _ in range(n):
            self(Tick())


def snapshot(sm) -> bytes:
    buf = io.BytesIO()
    sm.save_snapshot(buf)
    return buf.getvalue()


def restored(data: bytes) -> HAKeeperStateMachine:
    sm = HAKeeperStateMachine()
    sm.recover_from_snapshot(io.BytesIO(data))
    return sm


def running_cluster():
    """Three log stores running shard 1 (replicas 1-3, leader 1), one spare, one TN store."""
    d = Driver()
    for i in range(1, 5):
        d(RegisterStore(StoreRole.LOG, f"log-{i}", f"127.0.0.1:{7000 + i}"))
    d(RegisterStore(StoreRole.TN, "tn-1"))
    assert d(InitialCluster(ClusterInfo(log_shards=1, log_replicas=3))) is True
    members = ((1, "log-1"), (2, "log-2"), (3, "log-3"))
    for rid, sid in members:
        d(LogStoreHeartbeat(sid, (LogReplicaInfo(1, rid, 1, 1, 1, 10, members),)))
    d(LogStoreHeartbeat("log-4"))
    return d


def test_ticks_count_and_heartbeats_record_the_tick():
    d = running_cluster()
    assert d.sm.state.bootstrap == BootstrapState.RUNNING
    d.ticks(7)
    assert d.sm.lookup("tick") == 7
    d(TNHeartbeat("tn-1", ((1, 9),), 0))
    assert d.sm.state.stores["tn-1"].tick == 7
    assert d.sm.state.stores["log-1"].tick == 0


def test_down_rule_is_timeout_times_ticks_per_second_plus_last_tick_below_current():
    cfg = HAKeeperConfig()
    assert (cfg.ticks_per_second, cfg.log_store_timeout, cfg.tn_store_timeout) == (10, 300, 10)
    assert cfg.cn_store_timeout == 30
    assert cfg.timeout_ticks(StoreRole.LOG) == 3000 and cfg.timeout_ticks(StoreRole.TN) == 100
    assert cfg.timeout_ticks(StoreRole.CN) == 300
    assert not cfg.expired(StoreRole.TN, 5, 105) and cfg.expired(StoreRole.TN, 5, 106)
    assert not cfg.expired(StoreRole.LOG, 0, 3000) and cfg.expired(StoreRole.LOG, 0, 3001)
    short = HAKeeperConfig(ticks_per_second=4, cn_store_timeout=0.5)
    assert short.timeout_ticks(StoreRole.CN) == 2 and short.expired(StoreRole.CN, 1, 4) and not short.expired(
        StoreRole.CN, 1, 3)


def test_a_heartbeat_reply_returns_the_stores_batch_and_deletes_it():
    d = running_cluster()
    st = d.sm.state
    batch = ScheduleCommandBatch(1, st.index, (
        ScheduleCommand(C.START_TN, "tn-1", 1, 20, "tn-1", expires_tick=50),
        ScheduleCommand(C.KILL_ZOMBIE, "log-4", 1, 3, "log-4", expires_tick=50),
    ))
    # log-4 runs no replica 3: the whole batch is refused and nothing is queued
    with pytest.raises(UnknownReplicaError):
        d(batch)
    assert d.sm.state.queued == {} and d.sm.state.term == 0
    batch = ScheduleCommandBatch(1, d.sm.state.index, batch.commands[:1])
    assert d(batch) == 1
    assert d.sm.lookup(("queued", "tn-1")) == batch.commands
    assert d(TNHeartbeat("tn-1")) == batch.commands
    assert d.sm.lookup(("queued", "tn-1")) == ()
    assert d(TNHeartbeat("tn-1")) == ()
    # delivered, not finished: still in flight, so the same command is not queued twice
    assert d(ScheduleCommandBatch(1, d.sm.state.index, batch.commands)) == 0
    assert d(TNHeartbeat("tn-1")) == ()
    # the TN reports the shard: finished, out of flight
    d(TNHeartbeat("tn-1", ((1, 20),)))
    assert d.sm.state.in_flight == {}


def test_undelivered_commands_expire_with_their_tick():
    d = running_cluster()
    cmd = ScheduleCommand(C.START_TN, "tn-1", 1, 20, "tn-1", expires_tick=3)
    assert d(ScheduleCommandBatch(1, d.sm.state.index, (cmd,))) == 1
    d.ticks(3)
    assert d.sm.lookup(("queued", "tn-1")) == (cmd,)
    d.ticks(1)
    assert d.sm.lookup(("queued", "tn-1")) == () and d.sm.state.in_flight == {}


def test_batches_from_an_older_term_or_an_older_state_are_ignored():
    d = running_cluster()
    a = ScheduleCommand(C.START_TN, "tn-1", 1, 20, "tn-1", expires_tick=100)
    assert d(ScheduleCommandBatch(5, d.sm.state.index, (a,))) == 1
    before = snapshot(d.sm)
    b = ScheduleCommand(C.STOP_TN, "tn-1", 1, 20, "tn-1", expires_tick=100)
    # term 4 < 5: an old leader's checker output, however fresh its state
    assert d(ScheduleCommandBatch(4, d.sm.state.index, (a,))) == STALE_BATCH
    # same term, but computed on a state from before the last accepted batch: would double-issue
    assert d(ScheduleCommandBatch(5, d.sm.state.index - 5, (a,))) == STALE_BATCH
    after = d.sm.state
    assert after.term == 5 and after.queued == {"tn-1": [a]}
    assert restored(before).state.queued == after.queued
    # a newer term takes over and keeps what is already queued (nothing lost on a leader change)
    d(TNHeartbeat("tn-1", ((1, 20),)))  # (also finishes a)
    assert d(ScheduleCommandBatch(6, d.sm.state.index, (b,))) == 1 and d.sm.state.term == 6


def test_bootstrap_happens_once_and_never_again_on_replay_or_from_a_snapshot():
    d = running_cluster()
    st = d.sm.state
    assert st.bootstrap == BootstrapState.RUNNING and st.cluster == ClusterInfo(1, 3, 0, 1)
    # a restarted store process proposes its bootstrap again: ignored
    assert d(InitialCluster(ClusterInfo(log_shards=2, log_replicas=5))) is False
    assert d.sm.state.cluster == ClusterInfo(1, 3, 0, 1) and set(d.sm.state.shards) == {1}
    # replaying the whole log on a fresh replica gives the same state, byte for byte
    replay = Driver()
    for data in d.log:
        try:
            replay(data)
        except HAKeeperError:
            pass
    assert snapshot(replay.sm) == snapshot(d.sm)
    # recovering from a snapshot, then the bootstrap command again: still ignored
    again = Driver(restored(snapshot(d.sm)))
    again.log = list(d.log)
    assert again(InitialCluster(ClusterInfo(log_shards=3))) is False
    assert again.sm.state.bootstrap == BootstrapState.RUNNING and again.sm.state.cluster.log_shards == 1


def test_bootstrap_states_created_bootstrapping_running():
    d = Driver()
    assert d.sm.lookup("bootstrap") == BootstrapState.CREATED
    for i in (1, 2, 3):
        d(RegisterStore(StoreRole.LOG, f"log-{i}"))
    d(InitialCluster(ClusterInfo(log_shards=1, log_replicas=3)))
    assert d.sm.lookup("bootstrap") == BootstrapState.BOOTSTRAPPING
    members = ((1, "log-1"), (2, "log-2"), (3, "log-3"))
    d(LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1, 1, 1, 1, 0, members),)))
    d(LogStoreHeartbeat("log-3", (LogReplicaInfo(1, 7, 1, 0, 0, 0),)))   # not a founder's id
    assert d.sm.lookup("bootstrap") == BootstrapState.BOOTSTRAPPING   # one of three: no majority
    d(LogStoreHeartbeat("log-2", (LogReplicaInfo(1, 2, 1, 1, 1, 0, members),)))
    assert d.sm.lookup("bootstrap") == BootstrapState.RUNNING         # two of three run the shard


def test_snapshots_round_trip_and_corruption_is_typed():
    d = running_cluster()
    d.ticks(3)
    d(RegisterStore(StoreRole.RO, "ro-1"))
    d(RoHeartbeat("ro-1", 5, 9, 7))
    d(ScheduleCommandBatch(2, d.sm.state.index, (ScheduleCommand(C.START_TN, "tn-1", 1, 30, "tn-1",
                                                                 expires_tick=40),)))
    data = snapshot(d.sm)
    sm2 = restored(data)
    assert sm2.state == d.sm.state and snapshot(sm2) == data
    wrong_magic = b"HKSX" + data[4:]
    flipped = data[:20] + bytes([data[20] ^ 1]) + data[21:]        # a body byte: the CRC must catch it
    for bad in (data[:-1], data[:3], wrong_magic, flipped, b""):
        with pytest.raises(CorruptHAKeeperSnapshot):
            restored(bad)
    # a failed recovery leaves the replica's state alone
    with pytest.raises(CorruptHAKeeperSnapshot):
        sm2.recover_from_snapshot(io.BytesIO(data[:-3]))
    assert sm2.state == d.sm.state


@pytest.mark.parametrize("bad", [
    b"", b"H", b"HK", b"XX\x01\x01", b"HK\x02\x01", b"HK\x01\x63", b"HK\x01\x01\x00",
    b"HK\x01\x03", b"HK\x01\x03\x00\x05log-1", b"HK\x01\x03\x00\x05log-1\x00\x00\x00\x01",
    b"HK\x01\x07\x00\x04ro-1" + b"\x00" * 23, b"HK\x01\x02\x09\x00\x01a\x00\x00",
])
def test_malformed_commands_are_refused_with_typed_errors_and_change_nothing(bad):
    d = running_cluster()
    before = d.sm.state.copy()
    with pytest.raises(MalformedCommandError):
        d(bad)
    after = d.sm.state
    assert after.index == before.index + 1   # applied as a no-op: the same on every replica
    after.index = before.index
    assert after == before


def test_malformed_heartbeats_are_malformed_heartbeat_errors():
    d = running_cluster()
    good = encode_command(LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1, 1, 1, 1, 10, ((1, "log-1"),)),)))
    for bad in (good[:-1], good + b"\x00", good[:6] + b"\xff" + good[7:]):
        with pytest.raises(MalformedHeartbeatError):
            d(bad)
    with pytest.raises(MalformedHeartbeatError):   # leader 2 is not a voter
        encode_command(LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1, 1, 2, 1, 10, ((1, "log-1"),)),)))
    with pytest.raises(MalformedHeartbeatError):   # the same shard twice
        encode_command(LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1), LogReplicaInfo(1, 2))))
    with pytest.raises(MalformedHeartbeatError):
        encode_command(PrimaryHeartbeat("p", write_lsn=5, consistent_lsn=6))
    with pytest.raises(MalformedHeartbeatError):
        encode_command(CNHeartbeat("cn-1", watermark=-1))
    with pytest.raises(MalformedHeartbeatError):
        encode_command(TNHeartbeat(""))
    assert d.sm.state.stores["log-1"].report.replicas[0].latest_lsn == 10


def test_heartbeats_from_unknown_stores_and_wrong_roles_are_refused():
    d = running_cluster()
    before = snapshot(d.sm)
    with pytest.raises(UnknownStoreError):
        d(LogStoreHeartbeat("log-9"))
    with pytest.raises(UnknownStoreError):
        d(CNHeartbeat("log-1"))            # log-1 is a log store
    with pytest.raises(UnknownStoreError):
        d(RegisterStore(StoreRole.CN, "log-1"))
    st = d.sm.state
    assert "log-9" not in st.stores and st.stores["log-1"].role == StoreRole.LOG
    assert restored(before).state.stores == st.stores


@pytest.mark.parametrize("cmd,error", [
    (ScheduleCommand(C.REMOVE_REPLICA, "log-1", 1, 9, "log-9"), UnknownReplicaError),
    (ScheduleCommand(C.ADD_REPLICA, "log-1", 1, 3, "log-3", learner=False), UnknownReplicaError),  # not a learner
    (ScheduleCommand(C.ADD_REPLICA, "log-1", 1, 7, "log-9", learner=True), UnknownStoreError),
    (ScheduleCommand(C.START_REPLICA, "log-4", 1, 2, "log-4"), UnknownReplicaError),   # replica 2 lives on log-2
    (ScheduleCommand(C.STOP_REPLICA, "log-4", 1, 4, "log-4"), UnknownReplicaError),
    (ScheduleCommand(C.KILL_ZOMBIE, "log-1", 1, 2, "log-1"), UnknownReplicaError),
    (ScheduleCommand(C.START_REPLICA, "log-1", 2, 1, "log-1"), UnknownReplicaError),   # no shard 2
    (ScheduleCommand(C.START_TN, "tn-1", 3, 5, "tn-1"), UnknownReplicaError),          # no TN shard 3
    (ScheduleCommand(C.STOP_TN, "tn-1", 1, 5, "tn-1"), UnknownReplicaError),
    (ScheduleCommand(C.START_TN, "log-1", 1, 5, "log-1"), UnknownStoreError),          # not a TN store
    (ScheduleCommand(C.DELETE_CN_STORE, "cn-7"), UnknownStoreError),
    (ScheduleCommand(C.DROP_RO_NODE, "tn-1"), UnknownStoreError),
    (ScheduleCommand(C.START_REPLICA, "log-8", 1, 1, "log-8"), UnknownStoreError),
])
def test_schedule_commands_for_unknown_replicas_or_stores_are_refused(cmd, error):
    d = running_cluster()
    before = snapshot(d.sm)
    ok = ScheduleCommand(C.START_TN, "tn-1", 1, 20, "tn-1", expires_tick=9)
    with pytest.raises(error):
        d(ScheduleCommandBatch(3, d.sm.state.index, (ok, cmd)))
    st = restored(before).state
    st.index = d.sm.state.index
    assert d.sm.state == st   # the good command of the batch was not taken either


def test_expired_cn_and_ro_are_deleted_and_the_ro_leaves_the_truncation_hold():
    d = running_cluster()
    d(RegisterStore(StoreRole.PRIMARY, "primary"))
    d(RegisterStore(StoreRole.RO, "ro-1"))
    d(RegisterStore(StoreRole.RO, "ro-2"))
    d(RegisterStore(StoreRole.CN, "cn-1"))
    # ro-2 has not reported yet: it holds the truncation LSN where it is (0)
    d(RoHeartbeat("ro-1", 100, 120, 90))
    d(PrimaryHeartbeat("primary", 200, 150, 150))
    assert d.sm.lookup("truncation_lsn") == 0
    d(RoHeartbeat("ro-2", 100, 110, 60))
    d(PrimaryHeartbeat("primary", 200, 150, 150))
    assert d.sm.lookup("truncation_lsn") == 59     # min used 60: LSNs from 60 on are still needed
    assert d(ScheduleCommandBatch(1, d.sm.state.index, (ScheduleCommand(C.DROP_RO_NODE, "ro-2"),
                                                        ScheduleCommand(C.DELETE_CN_STORE, "cn-1")))) == 2
    assert "ro-2" not in d.sm.state.stores and "cn-1" not in d.sm.state.stores
    d(PrimaryHeartbeat("primary", 200, 150, 150))
    assert d.sm.lookup("truncation_lsn") == 89
    # the truncation LSN never moves back, whatever is asked
    d(PrimaryHeartbeat("primary", 200, 150, 10))
    assert d.sm.lookup("truncation_lsn") == 89
    # the dropped RO node must register again; until then its heartbeats are refused
    with pytest.raises(UnknownStoreError):
        d(RoHeartbeat("ro-2", 100, 110, 60))
    d(RegisterStore(StoreRole.RO, "ro-2"))
    d(RoHeartbeat("ro-2", 100, 130, 95))
    d(PrimaryHeartbeat("primary", 200, 150, 150))
    assert d.sm.lookup("truncation_lsn") == 89


def test_a_stale_report_moves_neither_membership_nor_leader():
    d = running_cluster()
    new = ((1, "log-1"), (2, "log-2"), (4, "log-4"))
    d(LogStoreHeartbeat("log-1", (LogReplicaInfo(1, 1, 2, 1, 5, 20, new),)))
    sh = d.sm.state.shards[1]
    assert sh.voters == dict(new) and sh.epoch == 5 and sh.term == 2
    # log-3's replica 3 was removed; its old report (epoch 1, term 1) changes nothing
    d(LogStoreHeartbeat("log-3", (LogReplicaInfo(1, 3, 1, 3, 1, 10, ((1, "log-1"), (2, "log-2"), (3, "log-3"))),)))
    sh = d.sm.state.shards[1]
    assert sh.voters == dict(new) and sh.leader_id == 1 and sh.term == 2


def test_update_refuses_entries_out_of_order_and_a_closed_machine():
    d = running_cluster()
    with pytest.raises(HAKeeperError):
        d.sm.update(Entry(1, encode_command(Tick())))
    d.sm.close()
    with pytest.raises(HAKeeperError):
        d(Tick())


# --- hypothesis: any command sequence, replayed or resumed from a snapshot, gives the same state -----

STORE_IDS = [("log-1", StoreRole.LOG), ("log-2", StoreRole.LOG), ("log-3", StoreRole.LOG), ("log-4", StoreRole.LOG),
             ("tn-1", StoreRole.TN), ("cn-1", StoreRole.CN), ("ro-1", StoreRole.RO), ("primary", StoreRole.PRIMARY)]
SHORT = HAKeeperConfig(log_store_timeout=0.5, tn_store_timeout=0.3, cn_store_timeout=0.3, ro_timeout=0.3,
                primary_timeout=0.3, command_timeout=0.4)


def _heartbeat(draw, sid, role):
    if role == StoreRole.LOG:
        voters = tuple((i, f"log-{i}") for i in sorted(draw(st.sets(st.integers(1, 4), min_size=1, max_size=3))))
        n = int(sid[-1])
        rep = LogReplicaInfo(1, n, draw(st.integers(0, 3)), draw(st.sampled_from([0] + [v for v, _ in voters])),
                             draw(st.integers(0, 5)), draw(st.integers(0, 50)), voters)
        return LogStoreHeartbeat(sid, (rep,) if draw(st.booleans()) else ())
    if role == StoreRole.TN:
        return TNHeartbeat(sid, ((1, draw(st.integers(1, 9))),) if draw(st.booleans()) else ())
    if role == StoreRole.CN:
        return CNHeartbeat(sid, draw(st.integers(0, 9)))
    if role == StoreRole.RO:
        applied = draw(st.integers(0, 50))
        return RoHeartbeat(sid, 0, applied, draw(st.integers(0, applied + 1)))
    write = draw(st.integers(0, 60))
    return PrimaryHeartbeat(sid, write, draw(st.integers(0, write)), draw(st.integers(0, write)))


@st.composite
def steps(draw):
    """Command recipes; a batch is computed when it is applied, from the state at that point."""
    out = []
    for _ in range(draw(st.integers(1, 80))):
        kind = draw(st.sampled_from(["tick", "tick", "register", "beat", "beat", "beat", "init", "batch", "junk"]))
        sid, role = draw(st.sampled_from(STORE_IDS))
        if kind == "tick":
            out.append(Tick())
        elif kind == "register":
            out.append(RegisterStore(role, sid, "a"))
        elif kind == "beat":
            out.append(_heartbeat(draw, sid, role))
        elif kind == "init":
            out.append(InitialCluster(ClusterInfo(1, draw(st.sampled_from([1, 3])), 0, 1)))
        elif kind == "batch":
            out.append(("batch", draw(st.integers(1, 4))))
        else:
            out.append(draw(st.binary(max_size=24)))
    return out


def _bytes(sm, step) -> bytes:
    if isinstance(step, tuple):
        b = leader_batch(sm.lookup("state"), SHORT, step[1])
        return encode_command(b) if b is not None else encode_command(Tick())
    return step if isinstance(step, bytes) else encode_command(step)


@given(steps(), st.data())
@scaled(150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_replay_and_snapshot_resume_reach_the_same_state(recipe, data):
    a = Driver()
    cut = data.draw(st.integers(0, len(recipe)))
    snap = None
    for n, step in enumerate(recipe):
        if n == cut:
            snap = snapshot(a.sm)
        before = snapshot(a.sm)
        try:
            a(_bytes(a.sm, step))
        except HAKeeperError:
            # refused: nothing but the applied index moved
            st_before = restored(before).state
            st_before.index = a.sm.state.index
            assert a.sm.state == st_before
    # a fresh replica replaying the log, and one resumed from the snapshot at `cut`
    b = Driver()
    for data_ in a.log:
        try:
            b(data_)
        except HAKeeperError:
            pass
    assert snapshot(b.sm) == snapshot(a.sm)
    c = restored(snap if snap is not None else snapshot(a.sm))
    for i, data_ in enumerate(a.log[cut:] if snap is not None else [], start=cut + 1):
        try:
            c.update(Entry(i, data_))
        except HAKeeperError:
            pass
    assert snapshot(c) == snapshot(a.sm)
    st_ = a.sm.state
    assert st_.bootstrap != BootstrapState.CREATED or not any(isinstance(s, InitialCluster) for s in recipe)
    fresh = [c.replica_id for cmds in st_.queued.values() for c in cmds if c.replica_id]
    assert st_.next_replica_id > max(fresh, default=0)


def test_a_cn_that_heartbeats_after_the_check_is_not_deleted():
    d = running_cluster()
    d(RegisterStore(StoreRole.CN, "cn-1"))
    d.ticks(400)
    cfg = HAKeeperConfig()
    cmds = [c for c in leader_batch(d.sm.lookup("state"), cfg, 1).commands if c.kind == C.DELETE_CN_STORE]
    assert [(c.target, c.store_tick) for c in cmds] == [("cn-1", 0)]
    d(CNHeartbeat("cn-1", 5))                       # it came back before the batch committed
    assert d(ScheduleCommandBatch(1, d.sm.state.index, tuple(cmds))) == 0
    assert "cn-1" in d.sm.state.stores
    d.ticks(400)
    cmds = [c for c in leader_batch(d.sm.lookup("state"), cfg, 1).commands if c.kind == C.DELETE_CN_STORE]
    assert d(ScheduleCommandBatch(1, d.sm.state.index, tuple(cmds))) == 1
    assert "cn-1" not in d.sm.state.stores


def test_replica_ids_the_stores_report_are_never_handed_out_and_a_failed_non_voting_add_leaves_no_trace():
    """Founders that bootstrapped on their own (a `cluster up`) report ids HAKeeper never issued: the
    next id is past them, so a non-voting add cannot name a voter (found by a real cluster: ids 1 and
    3 were handed out again and stayed in the non-voting set)."""
    d = Driver()
    for i in range(1, 5):
        d(RegisterStore(StoreRole.LOG, f"log-{i}", f"127.0.0.1:{7000 + i}"))
    d(InitialCluster(ClusterInfo(log_shards=1, log_replicas=3, non_voting_replicas=1)))
    members = ((1, "log-1"), (2, "log-2"), (3, "log-3"))
    for i in range(1, 4):
        d(LogStoreHeartbeat(f"log-{i}", (LogReplicaInfo(1, i, 1, 1, 5, 10, members),)))
    st = d.sm.lookup("state")
    assert st.next_replica_id == 4
    batch = leader_batch(st, HAKeeperConfig(command_timeout=1.0), 1)
    adds = [c for c in batch.commands if c.kind == C.ADD_NON_VOTING_REPLICA]
    assert [(c.replica_id, c.replica_store) for c in adds] == [(4, "log-4")]
    assert d(batch) >= 1 and d.sm.lookup("state").shards[1].non_voting == {4}
    d.ticks(11)   # never added: it expires, and 4 is not a non-voting replica
    assert d.sm.lookup("state").shards[1].non_voting == set()
