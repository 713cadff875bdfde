"""Databend's KV semantics on the embedded meta-service: seq, MatchSeq, DELETE/AS_IS, TTL, reads, txn;
through gRPC, and on a 3-replica Raft group of real processes."""
import itertools
import signal

import pytest

from logtide.engine.meta import (
    ANY, AS_IS, DELETE, GE, Branch, Exact, KVMeta, MetaService, SeqV, TxnReply, cond, op)
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse)
from logtide.errors import MetaInvalidArgument

from meta_clock import T0, ManualClock



@pytest.fixture
def clock():
    return ManualClock()


_turn = itertools.count()


@pytest.fixture(scope="module")
def fresh_groups(tmp_path_factory):
    """Fresh meta groups, one per case: the next case's group starts while the current case runs
    (a group's start is mostly process start-up and an election, so the two overlap well)."""
    from meta_cluster import MetaCluster
    from meta_clock import T0

    def start():
        d = tmp_path_factory.mktemp("meta-group")
        (d / "clock").write_text(str(T0))
        return MetaCluster(d, clock_file=d / "clock")

    spare = []

    def take():
        got = spare.pop() if spare else start()
        spare.append(start())
        return got

    yield take
    for c in spare:
        c.stop(signal.SIGKILL)


CARRIERS = ["embedded", "inprocess", "wire", "grpc", "raft"]


def on_carriers(name: str, values: list, raft: list):
    """Parametrize `ms` and `name` together: every value on each carrier, and only the values in
    `raft` on the Raft group. A Raft case costs a fresh group of three processes; it proves that a
    condition survives the replicated command and the replicas' apply, which one value per operator
    shows, while the other carriers run each value through the same state machine."""
    cases = [(c, v) for c in CARRIERS for v in values if c != "raft" or v in raft]
    return pytest.mark.parametrize(("ms", name), cases, indirect=["ms"])


@pytest.fixture(params=CARRIERS)
def ms(request, clock, tmp_path):
    """The same scenarios on the embedded service, through the RPC layer's in-process transport,
    through a real server on 127.0.0.1 (one port: logtide's framed carrier, and gRPC), and on a fresh 3-replica Raft group of separate
    `logtide meta serve --raft` processes (their clock is the test's, through a file). The raft
    client is pinned to one replica, replica 1, 2, 3 in turn across the cases, so two cases in
    three go through a follower that forwards every write and linearizable read to the leader."""
    if request.param == "raft":
        from logtide import connect_meta
        from meta_cluster import wait_ready
        cluster = request.getfixturevalue("fresh_groups")()
        clock.share(cluster.clock_file)
        try:
            wait_ready(cluster)
            with connect_meta(cluster.addr(next(_turn) % 3 + 1), follow_leader=False) as client:
                yield client
                # every reply names the leader's client address
                assert client.leader == cluster.addr(cluster.leader())
        finally:
            cluster.stop(signal.SIGKILL)    # a fresh group per case: nothing to close cleanly
        return
    with MetaService.in_memory(clock=clock) as s:
        if request.param == "embedded":
            yield s
            return
        from logtide import connect_meta
        if request.param == "inprocess":
            with connect_meta(s) as client:
                yield client
            return
        from logtide.engine.meta.server import MetaServer
        server = MetaServer(s, "127.0.0.1:0").start()
        try:
            with connect_meta(server.address, carrier=request.param) as client:
                yield client
                assert client.leader == server.address    # every reply names the leader
        finally:
            server.stop(0)


# ---------------------------------------------------------------- seq numbers

def test_seq_numbers_across_upsert_delete_failed_match_fetch_add_and_put_sequential(ms):
    prev, res = ms.upsert("a", b"1")
    assert prev is None and res.seq == 1 and res.data == b"1"
    _, res = ms.upsert("a", b"1")                 # rewriting the same value takes a seq
    assert res.seq == 2
    _, res = ms.upsert("b", b"x")
    assert res.seq == 3
    prev, res = ms.upsert("a", b"z", match_seq=Exact(1))   # failed match: no change, no seq
    assert prev == res and res.seq == 2 and res.data == b"1"
    prev, res = ms.upsert("a", DELETE)            # a delete takes no seq
    assert prev.seq == 2 and res is None
    assert ms.seq == 3
    _, res = ms.upsert("a", b"again")             # insert after delete: the next global seq
    assert res.seq == 4
    r = ms.txn(if_then=[op.fetch_add_u64("c", 5)])
    assert r.responses[0] == TxnFetchAddU64Response("c", 0, 0, 5, 5)
    r = ms.txn(if_then=[op.fetch_add_u64("c", 0)])  # every fetch-add takes a seq, even +0
    assert r.responses[0] == TxnFetchAddU64Response("c", 5, 5, 6, 5)
    r = ms.txn(if_then=[op.put_sequential("q/", "q_seq", b"v1"), op.put_sequential("q/", "q_seq", b"v2")])
    # each put_sequential: one seq for the counter, one for the put
    p1, p2 = r.responses
    assert p1.key == "q/" + "0" * 20 and p1.current.seq == 8
    assert p2.key == "q/" + "0" * 19 + "1" and p2.current.seq == 10
    assert ms.get("q_seq").data == b"2" and ms.get("q_seq").seq == 9
    assert ms.seq == 10


def test_global_seq_example_from_the_seed(ms):
    # insert foo (seq 1), update (2), delete (stays 2), insert again (3): CAS on the old seq fails
    assert ms.upsert("foo", b"a")[1].seq == 1
    assert ms.upsert("foo", b"b")[1].seq == 2
    ms.upsert("foo", DELETE)
    assert ms.upsert("foo", b"c")[1].seq == 3
    prev, res = ms.upsert("foo", b"d", match_seq=Exact(1))
    assert prev == res and res.data == b"c"


# ---------------------------------------------------------------- MatchSeq

def test_exact_zero_inserts_only_if_absent(ms):
    prev, res = ms.upsert("k", b"v", match_seq=Exact(0))
    assert prev is None and res.seq == 1
    prev, res = ms.upsert("k", b"w", match_seq=Exact(0))
    assert prev == res == SeqV(1, b"v", KVMeta(None, T0))


def test_ge_one_means_key_exists(ms):
    prev, res = ms.upsert("k", b"v", match_seq=GE(1))
    assert prev is None and res is None and ms.get("k") is None and ms.seq == 0
    ms.upsert("k", b"v")
    prev, res = ms.upsert("k", b"w", match_seq=GE(1))
    assert prev.data == b"v" and res.data == b"w" and res.seq == 2
    prev, res = ms.upsert("k", b"x", match_seq=GE(3))
    assert prev == res and res.data == b"w"
    assert ms.upsert("k", b"y", match_seq=GE(2))[1].data == b"y"


def test_exact_match_is_cas(ms):
    _, r1 = ms.upsert("k", b"1")
    _, r2 = ms.upsert("k", b"2", match_seq=Exact(r1.seq))
    assert r2.data == b"2"
    prev, res = ms.upsert("k", b"3", match_seq=Exact(r1.seq))
    assert prev == res == r2


def test_any_always_matches(ms):
    assert ms.upsert("k", b"1", match_seq=ANY)[1].seq == 1
    assert ms.upsert("k", b"2", match_seq=ANY)[1].seq == 2


def test_delete_with_match_and_missing_key(ms):
    assert ms.upsert("nope", DELETE) == (None, None)
    _, r = ms.upsert("k", b"v")
    prev, res = ms.upsert("k", DELETE, match_seq=Exact(r.seq + 1))
    assert prev == res == r
    prev, res = ms.upsert("k", DELETE, match_seq=Exact(r.seq))
    assert prev == r and res is None and ms.get("k") is None


def test_as_is_rewrites_only_the_meta(ms, clock):
    assert ms.upsert("k", AS_IS, ttl_ms=10) == (None, None)   # nothing to keep
    assert ms.seq == 0
    _, r = ms.upsert("k", b"v", ttl_ms=1000)
    assert r.meta.expire_at_ms == T0 + 1000
    clock.t += 500
    prev, res = ms.upsert("k", AS_IS, ttl_ms=1000)             # lease extension
    assert prev == r and res.data == b"v" and res.seq == r.seq + 1
    assert res.meta == KVMeta(T0 + 1500, T0 + 500)
    _, res = ms.upsert("k", AS_IS)                            # no meta: the expiry is gone
    assert res.meta.expire_at_ms is None and res.data == b"v"


# ---------------------------------------------------------------- expiry on log time

def test_ttl_is_relative_to_the_entry_time(ms, clock):
    _, r = ms.upsert("k", b"v", ttl_ms=2000)
    assert r.meta == KVMeta(T0 + 2000, T0)
    clock.t = T0 + 2000
    assert ms.get("k") == r           # a key expiring at t still exists at t
    clock.t = T0 + 2001
    assert ms.get("k") is None        # reads hide it at local time


@pytest.mark.parametrize("expire_at, expected_ms", [
    (1_700_000_123, 1_700_000_123_000),             # seconds
    (100_000_000_000, 100_000_000_000_000),         # the threshold itself is seconds
    (100_000_000_001, 100_000_000_001),             # above: milliseconds
    (T0 + 5000, T0 + 5000),
])
def test_expire_at_seconds_or_milliseconds(ms, expire_at, expected_ms):
    _, r = ms.upsert("k", b"v", expire_at=expire_at)
    assert r.meta.expire_at_ms == expected_ms


def test_expiry_on_log_time_against_local_time(clock):
    from logtide.engine.meta import MetaStateMachine
    from logtide.engine.meta.log_entry import encode_entry
    from logtide.engine.meta.command import UpsertCmd, MetaSpec
    from logtide.engine.statemachine import Entry
    sm = MetaStateMachine()
    seen = []
    sm.subscribe(seen.extend)
    sm.update(Entry(1, encode_entry(T0, UpsertCmd("k", b"v", spec=MetaSpec(ttl_ms=1000)))))
    # local time far ahead: reads hide the key, but the state still holds it (no entry applied since)
    assert sm.get("k", T0 + 10_000) is None
    assert sm.get_maybe_expired("k") is not None
    # an entry whose log time is before the expiry leaves it in place, whatever the local time
    sm.update(Entry(2, encode_entry(T0 + 999, UpsertCmd("x", b"1"))))
    assert sm.get_maybe_expired("k") is not None
    assert sm.get("k", T0 + 999) is not None
    # the first entry past the expiry removes it before applying, and reports the removal
    prev_k = sm.get_maybe_expired("k")
    seen.clear()
    sm.update(Entry(3, encode_entry(T0 + 1001, UpsertCmd("y", b"1"))))
    assert sm.get_maybe_expired("k") is None
    assert seen[0] == ("k", prev_k, None)


def test_expired_keys_are_removed_in_expiry_then_seq_order(clock):
    from logtide.engine.meta import MetaStateMachine
    from logtide.engine.meta.command import UpsertCmd, MetaSpec
    sm = MetaStateMachine()
    seen = []
    sm.subscribe(seen.extend)
    sm.apply(1, T0, UpsertCmd("c", b"1", spec=MetaSpec(expire_at=T0 + 50)))        # seq 1, exp +50
    sm.apply(2, T0, UpsertCmd("a", b"1", spec=MetaSpec(expire_at=T0 + 100)))       # seq 2, exp +100
    sm.apply(3, T0, UpsertCmd("b", b"1", spec=MetaSpec(expire_at=T0 + 50)))        # seq 3, exp +50
    sm.apply(4, T0, UpsertCmd("d", b"1", spec=MetaSpec(ttl_ms=10_000)))
    seen.clear()
    sm.apply(5, T0 + 200, UpsertCmd("z", b"1"))
    assert [(k, cur) for k, _, cur in seen[:3]] == [("c", None), ("b", None), ("a", None)]
    assert seen[3][0] == "z"
    assert [k for k, _ in sm.items()] == ["d", "z"]


def test_a_write_that_is_already_expired_is_invisible(ms, clock):
    prev, res = ms.upsert("k", b"v", expire_at=T0 - 10_000)
    assert res is not None and ms.get("k") is None


def test_proposer_clock_is_kept_monotonic(ms, clock):
    _, r1 = ms.upsert("a", b"1")
    clock.t -= 5000                       # the wall clock steps back
    _, r2 = ms.upsert("b", b"1", ttl_ms=100)
    assert r2.meta.proposed_at_ms == r1.meta.proposed_at_ms == T0
    assert r2.meta.expire_at_ms == T0 + 100


# ---------------------------------------------------------------- reads

def test_get_mget_list_in_key_order_with_limits(ms, clock):
    for k in ["p/c", "p/a", "q/x", "p/b", "o"]:
        ms.upsert(k, k.encode())
    ms.upsert("p/d", b"short", ttl_ms=10)
    assert ms.get("p/a").data == b"p/a"
    assert ms.get("missing") is None
    got = ms.mget(["q/x", "missing", "p/c"])
    assert [g.data if g else None for g in got] == [b"q/x", None, b"p/c"]
    assert [k for k, _ in ms.list("p/")] == ["p/a", "p/b", "p/c", "p/d"]
    clock.t += 100
    assert [k for k, _ in ms.list("p/")] == ["p/a", "p/b", "p/c"]      # expired at local time: hidden
    assert [k for k, _ in ms.list("p/", limit=2)] == ["p/a", "p/b"]
    assert ms.list("p/", limit=0) == []
    assert [k for k, _ in ms.list("")] == ["o", "p/a", "p/b", "p/c", "q/x"]
    assert ms.list("zz") == []


def test_list_prefix_bounds_with_high_code_points(ms):
    for k in ["a", "a\uffff", "a\U0010ffff", "a\U0010ffffx", "b"]:
        ms.upsert(k, b"1")
    assert [k for k, _ in ms.list("a")] == ["a", "a\uffff", "a\U0010ffff", "a\U0010ffffx"]
    assert [k for k, _ in ms.list("a\U0010ffff")] == ["a\U0010ffff", "a\U0010ffffx"]


# ---------------------------------------------------------------- transactions

OPS = ["==", "!=", "<", "<=", ">", ">="]


def _truth(a, o, b):
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[o]


@pytest.mark.parametrize("operator", OPS)
@on_carriers("rhs", [1, 2, 3], raft=[2])
def test_seq_condition_all_six_operators(ms, operator, rhs):
    ms.upsert("x", b"0")
    ms.upsert("k", b"v")                     # seq 2
    r = ms.txn(conditions=[cond.seq("k", operator, rhs)], if_then=[op.get("k")], else_then=[])
    assert r.success is _truth(2, operator, rhs)
    assert r.execution_path == ("then" if r.success else "else")


@pytest.mark.parametrize("operator", OPS)
def test_seq_condition_on_missing_key_compares_zero(ms, operator):
    r = ms.txn(conditions=[cond.seq("missing", operator, 0)])
    assert r.success is _truth(0, operator, 0)


@pytest.mark.parametrize("operator", OPS)
@on_carriers("rhs", [b"a", b"m", b"z", b"ma"], raft=[b"m"])
def test_value_condition_all_six_operators(ms, operator, rhs):
    ms.upsert("k", b"m")
    r = ms.txn(conditions=[cond.value("k", operator, rhs)])
    assert r.success is _truth(b"m", operator, rhs)


@pytest.mark.parametrize("operator", OPS)
def test_value_condition_on_missing_key_is_false_for_every_operator(ms, operator):
    r = ms.txn(conditions=[cond.value("missing", operator, b"")], if_then=[op.put("t", b"1")],
               else_then=[op.put("e", b"1")])
    assert r.success is False and r.execution_path == "else"
    assert ms.get("e") is not None and ms.get("t") is None


@pytest.mark.parametrize("operator", OPS)
@on_carriers("rhs", [0, 2, 3, 4], raft=[3])
def test_prefix_count_condition_all_six_operators(ms, operator, rhs):
    for k in ["p/1", "p/2", "p/3", "pq", "o"]:
        ms.upsert(k, b"1")
    r = ms.txn(conditions=[cond.prefix_count("p/", operator, rhs)])
    assert r.success is _truth(3, operator, rhs)


def test_conditions_are_anded_and_empty_conditions_hold(ms):
    ms.upsert("k", b"v")
    assert ms.txn(conditions=[]).success is True
    r = ms.txn(conditions=[cond.seq("k", "==", 1), cond.value("k", "==", b"nope")],
               if_then=[op.put("a", b"1")], else_then=[op.get("k")])
    assert r == TxnReply(False, (TxnGetResponse("k", ms.get("k")),), "else")
    assert ms.get("a") is None


def test_txn_ops_responses_and_later_ops_see_earlier_results(ms, clock):
    ms.upsert("p/1", b"a")
    ms.upsert("p/2", b"b")
    r = ms.txn(
        conditions=[cond.prefix_count("p/", "==", 2)],
        if_then=[
            op.put("k", b"v1"),
            op.get("k"),
            op.put("k", b"v2", match_seq=3),             # sees the put above (seq 3)
            op.delete("k", match_seq=3),                 # stale: fails
            op.delete("k", match_seq=4),
            op.get("k"),
            op.delete_by_prefix("p/"),
            op.fetch_add_u64("c", 5),
            op.fetch_add_u64("c", 7, match_seq=1),       # mismatch: unchanged
            op.fetch_add_u64("c", -100),                 # saturates at 0
            op.put("t", b"x", ttl_ms=50),
        ],
        else_then=[op.get("k")])
    assert r.success and r.execution_path == "then"
    rs = r.responses
    assert rs[0] == TxnPutResponse("k", None, SeqV(3, b"v1", KVMeta(None, T0)))
    assert rs[1] == TxnGetResponse("k", SeqV(3, b"v1", KVMeta(None, T0)))
    assert rs[2].prev.seq == 3 and rs[2].current.seq == 4 and rs[2].current.data == b"v2"
    assert rs[3] == TxnDeleteResponse("k", False, rs[2].current)
    assert rs[4] == TxnDeleteResponse("k", True, rs[2].current)
    assert rs[5] == TxnGetResponse("k", None)
    assert rs[6] == TxnDeleteByPrefixResponse("p/", 2)
    assert rs[7] == TxnFetchAddU64Response("c", 0, 0, 5, 5)
    assert rs[8] == TxnFetchAddU64Response("c", 5, 5, 5, 5)
    assert rs[9] == TxnFetchAddU64Response("c", 5, 5, 6, 0)
    assert rs[10].current.meta.expire_at_ms == T0 + 50
    assert ms.list("p/") == [] and ms.get("c").data == b"0"


def test_fetch_add_u64_saturates_at_u64_max(ms):
    top = (1 << 64) - 1
    ms.upsert("c", str(top - 3).encode())
    r = ms.txn(if_then=[op.fetch_add_u64("c", 10)])
    assert r.responses[0].after == top
    assert ms.get("c").data == str(top).encode()
    ms.upsert("junk", b"not a number")
    r = ms.txn(if_then=[op.fetch_add_u64("junk", 2)])
    assert (r.responses[0].before, r.responses[0].after) == (0, 2)


def test_fetch_add_keeps_the_lease(ms):
    ms.upsert("c", b"1", ttl_ms=1000)
    r = ms.txn(if_then=[op.fetch_add_u64("c", 1)])
    assert ms.get("c").meta.expire_at_ms == T0 + 1000 and r.responses[0].after == 2


def test_put_sequential_keys_and_ttl(ms):
    ms.upsert("q_seq", b"41")
    r = ms.txn(if_then=[op.put_sequential("q/", "q_seq", b"v", ttl_ms=100)])
    put = r.responses[0]
    assert put.key == "q/00000000000000000041" and put.prev is None
    assert put.current.data == b"v" and put.current.meta.expire_at_ms == T0 + 100
    assert ms.get("q_seq").data == b"42"


def test_else_branch_runs_else_ops(ms):
    r = ms.txn(conditions=[cond.seq("k", ">", 0)], if_then=[op.put("k", b"then")],
               else_then=[op.put("k", b"else"), op.get("k")])
    assert r.success is False and r.execution_path == "else"
    assert r.responses[1].value.data == b"else"


def test_branches_first_true_wins_and_all_any(ms):
    ms.upsert("x", b"1")          # seq 1
    r = ms.txn(branches=[
        Branch(cond.all(cond.seq("x", "==", 0)), [op.put("r", b"first")]),
        Branch(cond.any(cond.seq("x", "==", 0), cond.value("x", "==", b"1")), [op.put("r", b"second")]),
        Branch(None, [op.put("r", b"third")]),
    ])
    assert r.success and r.execution_path == "operation:1"
    assert ms.get("r").data == b"second"
    # nested expressions
    r = ms.txn(branches=[Branch(cond.all(cond.any(cond.seq("x", ">", 5), cond.prefix_count("", ">=", 2)),
                                         cond.value("r", "==", b"second")), [op.get("r")])])
    assert r.execution_path == "operation:0"
    # no branch holds: the conditions decide between then and else
    r = ms.txn(conditions=[cond.seq("x", "==", 99)], if_then=[op.get("x")], else_then=[op.get("r")],
               branches=[Branch(cond.all(cond.seq("x", "==", 0)), [op.put("r", b"no")])])
    assert r.execution_path == "else" and r.success is False and r.responses[0].value.data == b"second"
    # `operations` is an alias of `branches`
    r = ms.txn(operations=[Branch(cond.seq("x", "==", 1), [op.get("x")])])
    assert r.execution_path == "operation:0"


def test_txn_reads_see_log_time_not_local_time(ms, clock):
    ms.upsert("lease", b"n1", ttl_ms=100)
    clock.t += 50
    r = ms.txn(conditions=[cond.seq("lease", ">", 0)])
    assert r.success
    clock.t += 100
    r = ms.txn(conditions=[cond.seq("lease", "==", 0)], if_then=[op.get("lease")])
    assert r.success and r.responses[0].value is None


# ---------------------------------------------------------------- bad input

BAD_CALLS = [
    lambda ms: ms.upsert(b"bytes-key", b"v"),
    lambda ms: ms.upsert("k", "str-value"),
    lambda ms: ms.upsert("k", 5),
    lambda ms: ms.upsert("k", b"v", match_seq=3),
    lambda ms: ms.upsert("k", b"v", match_seq=Exact(-1)),
    lambda ms: ms.upsert("k", b"v", ttl_ms=-5),
    lambda ms: ms.upsert("k", b"v", ttl_ms=5, expire_at=5),
    lambda ms: ms.upsert("k", b"v", ttl_ms="5"),
    lambda ms: ms.upsert("k" * 5000, b"v"),
    lambda ms: ms.upsert("k", b"x" * ((1 << 20) + 1)),
    lambda ms: ms.upsert("\ud800", b"v"),
    lambda ms: ms.get(5),
    lambda ms: ms.mget("abc"),
    lambda ms: ms.list("p", limit=-1),
    lambda ms: ms.list("p", limit="3"),
    lambda ms: ms.txn(conditions=[cond.seq("k", "=~", 1)]),
    lambda ms: ms.txn(conditions=[("k", "==", 1)]),
    lambda ms: ms.txn(if_then=["put"]),
    lambda ms: ms.txn(if_then=op.get("k")),
    lambda ms: ms.txn(if_then=[op.fetch_add_u64("c", 1.5)]),
    lambda ms: ms.txn(if_then=[op.put("k", b"v", match_seq=Exact(1))]),
    lambda ms: ms.txn(if_then=[op.get("k")] * 2000),
    lambda ms: ms.txn(branches=[Branch("yes", [])]),
    lambda ms: ms.watch("a", filter="some"),
    # the key it would make (prefix + 20 digits) is over the limit: get() could never read it
    lambda ms: ms.txn(if_then=[op.put("a", b"1"), op.put_sequential("p" * 4080, "seq", b"v")]),
]


@on_carriers("call", BAD_CALLS, raft=[])
def test_bad_input_gets_a_typed_error_and_changes_nothing(ms, call):
    ms.upsert("keep", b"1")
    with pytest.raises(MetaInvalidArgument):
        call(ms)
    assert ms.seq == 1 and ms.get("keep").data == b"1"
    assert ms.upsert("after", b"ok")[1].seq == 2     # still serving


@pytest.mark.parametrize("ms", ["raft"], indirect=True)
def test_every_bad_input_in_turn_on_one_raft_group(ms):
    """The bad calls above, one after another on one Raft group: each is refused, changes nothing,
    and the group serves the next write."""
    ms.upsert("keep", b"1")
    for k, call in enumerate(BAD_CALLS):
        with pytest.raises(MetaInvalidArgument):
            call(ms)
        assert ms.seq == 1 + k and ms.get("keep").data == b"1", f"bad call {k}"
        assert ms.upsert(f"after/{k}", b"ok")[1].seq == 2 + k     # still serving
