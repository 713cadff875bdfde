"""The linearizability checker: known non-linearizable histories are rejected, linearizable ones
accepted, timed-out operations may or may not take effect, and the search agrees with a brute-force
enumeration of every order (hypothesis)."""
import itertools

from hypothesis import HealthCheck, given, strategies as st
from hypothesis_profiles import scaled

from logtide.engine.raft.lincheck import INF, UNKNOWN, LogModel, Operation, RegisterModel, check_operations

R, L = RegisterModel(), LogModel()


def op(client, inp, call, out=UNKNOWN, ret=INF):
    return Operation(client, inp, call, out, ret)


# --- register ------------------------------------------------------------------------------------

def test_register_concurrent_reads_may_see_either_value():
    h = [op(0, ("write", 1), 0, None, 10), op(1, ("read",), 1, 0, 2), op(2, ("read",), 3, 1, 4)]
    assert check_operations(R, h).ok


def test_register_stale_read_after_the_write_returned_is_rejected():
    h = [op(0, ("write", 1), 0, None, 1), op(1, ("read",), 2, 0, 3)]
    assert not check_operations(R, h).ok


def test_register_new_then_old_is_rejected():
    # the write overlaps both reads, but once a read saw 1 a later read cannot see 0
    h = [op(0, ("write", 1), 0, None, 10), op(1, ("read",), 1, 1, 2), op(2, ("read",), 3, 0, 4)]
    assert not check_operations(R, h).ok


def test_register_timed_out_write_may_or_may_not_happen():
    w = op(0, ("write", 1), 0)
    assert check_operations(R, [w, op(1, ("read",), 5, 1, 6)]).ok
    assert check_operations(R, [w, op(1, ("read",), 5, 0, 6)]).ok
    assert not check_operations(R, [w, op(1, ("read",), 5, 1, 6), op(1, ("read",), 7, 0, 8)]).ok


def test_register_read_before_the_write_was_called_is_rejected():
    h = [op(1, ("read",), 0, 1, 1), op(0, ("write", 1), 2, None, 3)]
    assert not check_operations(R, h).ok


# --- the log service model -------------------------------------------------------------------------

def test_log_linearizable_history_with_every_operation():
    h = [
        op(0, ("append", b"a"), 0, 3, 2),
        op(1, ("append", b"b"), 1, 4, 3),
        op(2, ("tso", 10), 1, 1, 2),
        op(2, ("tso", 5), 3, 11, 4),
        op(0, ("read", 1), 4, ((3, b"a"), (4, b"b")), 5),
        op(1, ("truncate", 3), 6, "ok", 7),
        op(2, ("truncated",), 8, 3, 9),
        op(0, ("read", 2), 8, "truncated", 9),
        op(1, ("truncate", 2), 10, "invalid", 11),
        op(0, ("read", 4), 12, ((4, b"b"),), 13),
    ]
    assert check_operations(L, h).ok


def test_log_rejects_two_appends_at_one_lsn():
    h = [op(0, ("append", b"a"), 0, 5, 1), op(1, ("append", b"b"), 0, 5, 1)]
    assert not check_operations(L, h).ok


def test_log_rejects_an_acknowledged_append_missing_from_a_later_read():
    h = [op(0, ("append", b"a"), 0, 3, 1), op(0, ("append", b"b"), 2, 4, 3), op(1, ("read", 1), 5, ((3, b"a"),), 6)]
    assert not check_operations(L, h).ok


def test_log_rejects_lsns_out_of_real_time_order():
    h = [op(0, ("append", b"a"), 0, 7, 1), op(1, ("append", b"b"), 2, 6, 3)]
    assert not check_operations(L, h).ok


def test_log_rejects_a_duplicated_record():
    h = [op(0, ("append", b"a"), 0, 3, 1), op(1, ("read", 1), 2, ((3, b"a"), (4, b"a")), 3)]
    assert not check_operations(L, h).ok


def test_log_rejects_overlapping_tso_ranges_and_truncation_going_back():
    assert not check_operations(L, [op(0, ("tso", 10), 0, 1, 1), op(1, ("tso", 1), 2, 5, 3)]).ok
    h = [op(0, ("append", b"a"), 0, 9, 1), op(0, ("truncate", 8), 2, "ok", 3), op(1, ("truncated",), 4, 0, 5)]
    assert not check_operations(L, h).ok


def test_log_timed_out_append_binds_its_lsn_at_the_first_read():
    lost = op(0, ("append", b"x"), 0)
    seen = op(1, ("read", 1), 5, ((3, b"x"),), 6)
    assert check_operations(L, [lost, seen]).ok
    assert check_operations(L, [lost, op(1, ("read", 1), 5, (), 6)]).ok
    # seen once at LSN 3: it can neither vanish nor move
    assert not check_operations(L, [lost, seen, op(1, ("read", 1), 7, (), 8)]).ok
    assert not check_operations(L, [lost, seen, op(1, ("read", 1), 7, ((4, b"x"),), 8)]).ok


# --- differential: the search against every permutation ---------------------------------------------

def brute_force(model, ops) -> bool:
    """Try every order that respects real time (a before b when a returned before b was called);
    timed-out operations may also be left out."""
    n = len(ops)
    pending = [i for i in range(n) if ops[i].output is UNKNOWN]
    for drop in itertools.chain.from_iterable(itertools.combinations(pending, k) for k in range(len(pending) + 1)):
        keep = [i for i in range(n) if i not in drop]
        for perm in itertools.permutations(keep):
            pos = {i: k for k, i in enumerate(perm)}
            if any(ops[a].ret < ops[b].call and pos[a] > pos[b] for a in keep for b in keep):
                continue
            state, ok = model.init(), True
            for i in perm:
                ok, state = model.step(state, ops[i].input, ops[i].output)
                if not ok:
                    break
            if ok:
                return True
    return False


@st.composite
def register_histories(draw):
    n = draw(st.integers(1, 6))
    ops = []
    for k in range(n):
        call = draw(st.integers(0, 12))
        timed_out = draw(st.integers(0, 5)) == 0
        ret = INF if timed_out else call + draw(st.integers(0, 6))
        if draw(st.booleans()):
            ops.append(op(k, ("write", draw(st.integers(0, 2))), call, UNKNOWN if timed_out else None, ret))
        else:
            ops.append(op(k, ("read",), call, UNKNOWN if timed_out else draw(st.integers(0, 2)), ret))
    return ops


@scaled(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(register_histories())
def test_search_agrees_with_brute_force(ops):
    assert check_operations(R, ops).ok == brute_force(R, ops)


# --- the simulator's client histories ------------------------------------------------------------

def test_simulated_client_histories_are_linearizable_and_tampering_is_caught():
    """Appends (acknowledged, refused or timed out) and ReadIndex reads recorded by the simulator
    under faults are linearizable; the same histories with one acknowledged record dropped from a
    read, or with two LSNs swapped, are not."""
    from logtide.engine.raft.sim import Simulation
    tampered = 0
    for seed in range(150):
        sim = Simulation(seed, record=True)
        assert sim.run().ok
        ops = sim.operations()
        assert check_operations(L, ops).ok, f"seed {seed}: history not linearizable"
        reads = [k for k, o in enumerate(ops) if o.input[0] == "read" and isinstance(o.output, tuple)
                 and len(o.output) >= 2]
        acked = [k for k, o in enumerate(ops) if o.input[0] == "append" and not o.timed_out]
        if not reads or len(acked) < 2:
            continue
        k = reads[-1]
        r = ops[k]
        done = {ops[j].input[1]: ops[j] for j in acked if ops[j].ret < r.call}
        victim = next((rec for rec in r.output if rec[1] in done), None)
        if victim is None:
            continue
        bad = list(ops)
        bad[k] = Operation(r.client, r.input, r.call, tuple(x for x in r.output if x != victim), r.ret)
        assert not check_operations(L, bad).ok, f"seed {seed}: a read missing an acknowledged record was accepted"
        a, b = ops[acked[0]], ops[acked[-1]]
        if a.ret < b.call:
            bad = list(ops)
            bad[acked[0]] = Operation(a.client, a.input, a.call, b.output, a.ret)
            bad[acked[-1]] = Operation(b.client, b.input, b.call, a.output, b.ret)
            assert not check_operations(L, bad).ok, f"seed {seed}: swapped LSNs were accepted"
        tampered += 1
    assert tampered > 100


# --- one meta-service key (KVKeyModel) -----------------------------------------------------------

def test_kv_key_history_with_puts_cas_and_reads_is_accepted():
    from logtide.engine.raft.lincheck import KVKeyModel
    h = [op(0, ("put", b"a"), 0, (0, None, 3), 1),
         op(1, ("cas", 3, b"b"), 2, (3, b"a", 5), 4),
         op(2, ("cas", 3, b"c"), 3, (5, b"b", 5), 6),       # lost the race: nothing changes
         op(0, ("get",), 7, (5, b"b"), 8)]
    assert check_operations(KVKeyModel(), h).ok


def test_kv_key_rejects_a_lost_acknowledged_write_a_stale_read_and_a_seq_going_back():
    from logtide.engine.raft.lincheck import KVKeyModel
    lost = [op(0, ("put", b"a"), 0, (0, None, 3), 1), op(1, ("put", b"b"), 2, (3, b"a", 4), 3),
            op(0, ("get",), 4, (3, b"a"), 5)]
    stale = [op(0, ("put", b"a"), 0, (0, None, 3), 1), op(1, ("get",), 2, (0, None), 3)]
    back = [op(0, ("put", b"a"), 0, (0, None, 7), 1), op(1, ("put", b"b"), 2, (7, b"a", 6), 3)]
    bad_cas = [op(0, ("put", b"a"), 0, (0, None, 3), 1), op(1, ("cas", 2, b"b"), 2, (3, b"a", 4), 3)]
    for h in (lost, stale, back, bad_cas):
        assert not check_operations(KVKeyModel(), h).ok, h


def test_kv_key_timed_out_write_seen_later_took_effect_unseen_may_not_have():
    from logtide.engine.raft.lincheck import KVKeyModel
    seen = [op(0, ("put", b"a"), 0, (0, None, 3), 1), op(1, ("put", b"x"), 2),       # timed out
            op(0, ("get",), 5, (9, b"x"), 6), op(2, ("put", b"c"), 7, (9, b"x", 10), 8)]
    assert check_operations(KVKeyModel(), seen).ok
    unseen = [op(0, ("put", b"a"), 0, (0, None, 3), 1), op(1, ("put", b"x"), 2),
              op(0, ("get",), 5, (3, b"a"), 6)]
    assert check_operations(KVKeyModel(), unseen).ok
