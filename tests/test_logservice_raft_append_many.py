"""The replicated log's multi-record append (`append_each`: one call, one proposal batch, each
record's LSN): the state machine's exactly-once bookkeeping against a simple model (hypothesis),
and three in-process replicas over the framed carrier on loopback, with a retried call and the
leader stopped while batches are in flight; the same client over their gRPC ports."""
import io
import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled
from ports import free_ports

from logtide.engine.logservice import connect_logservice
from logtide.engine.logservice import replicated_pb2 as pb
from logtide.engine.logservice.replicated import REPLICATED_SERVICE, ReplicatedLogService
from logtide.engine.logservice.replicated_client import NoLeaderError
from logtide.engine.logservice.replicated_state_machine import (
    ReplicatedLogStateMachine, append_command, batch_append_commands, parse_append)
from logtide.engine.nodehost.channel import connect_replica
from logtide.engine.statemachine import Entry
from logtide.errors import InvalidArgument

# --- the state machine against a model ---------------------------------------------------------------

# one step: (client, kind, n, prefix) with kind 0 a single append, 1 a new batch of n records,
# 2 a retry of the client's latest batch (while it has not moved on); an attempt reaches the log as
# its first `prefix` records (a leader change cut it), the rest of them never (a retry carries them)
STEP = st.tuples(st.integers(1, 3), st.integers(0, 2), st.integers(1, 6), st.integers(0, 6))


@scaled(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=40), st.integers(0, 40))
def test_batch_appends_are_exactly_once_against_a_model(steps, snapshot_at):
    sm = ReplicatedLogStateMachine()
    index = 0
    seqs = {}        # client -> its last seq handed out
    batch = {}       # client -> the seqs of its latest batch
    stored = {}      # model: (client, seq) -> the LSN of its first arrival after the client's newer seqs
    last = {}        # model: client -> the highest seq stored
    visible = []     # model: the LSNs of records a read shows
    for k, (client, kind, n, prefix) in enumerate(steps):
        if k == snapshot_at:  # the bookkeeping survives a snapshot (a replica that restarts from one)
            buf = io.BytesIO()
            sm.save_snapshot(buf)
            sm = ReplicatedLogStateMachine()
            sm.recover_from_snapshot(io.BytesIO(buf.getvalue()))
        if kind == 0:  # the client's thread moved on: it retries no older batch
            batch.pop(client, None)
            seqs[client] = seqs.get(client, 0) + 1
            cmds, want = [append_command(client, seqs[client], 0, b"x")], [seqs[client]]
        else:
            if kind == 1 or client not in batch:
                first = seqs.get(client, 0) + 1
                seqs[client] = first + n - 1
                batch[client] = list(range(first, first + n))
            ss = batch[client]
            cmds = batch_append_commands(client, ss[0], 0, [b"r%d" % s for s in ss])[:prefix]
            want = ss[:prefix]
        results = []
        for cmd, seq in zip(cmds, want):
            index += 1
            try:
                results.append(sm.update(Entry(index, cmd)))
            except InvalidArgument:
                results.append(None)
            if seq > last.get(client, 0):
                stored[(client, seq)] = index
                last[client] = seq
                visible.append(index)
        if kind != 0 and prefix >= len(batch[client]):  # a whole attempt: every record gets its LSN
            assert results == [stored[(client, s)] for s in batch[client]]
        if kind == 0:
            assert results == [stored[(client, want[0])]]
    shown = [i for i in range(1, index + 1) if i not in sm.duplicates]
    assert shown == visible


def test_parse_append_reads_both_kinds():
    one = append_command(7, 3, 9, b"data")
    many = batch_append_commands(7, 4, 9, [b"a", b"bc"])
    assert parse_append(one) == (7, 3, 9, b"data")
    assert [parse_append(c) for c in many] == [(7, 4, 9, b"a"), (7, 5, 9, b"bc")]
    assert parse_append(b"B" + b"\0" * 20) is None  # too short for a batch record's header
    sm = ReplicatedLogStateMachine()
    try:
        sm.update(Entry(1, b"B" + b"\0" * 20))
    except InvalidArgument as exc:
        assert "truncated" in str(exc)
    else:
        raise AssertionError("a truncated batch record was applied")


# --- three replicas ------------------------------------------------------------------------------------

def _group(tmp_path, grpc: bool = False):
    ports = dict(zip((1, 2, 3), free_ports(3)))
    peers = {i: f"127.0.0.1:{p}" for i, p in ports.items()}
    return {i: ReplicatedLogService.open(tmp_path / f"r{i}", i, peers, peers[i], tick_interval=0.05,
                                         request_timeout=2.0, grpc_listen="127.0.0.1:0" if grpc else None)
            for i in peers}, peers


def _leader(svcs, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ls = [i for i, s in svcs.items() if s.node.is_leader()]
        if len(ls) == 1:
            return ls[0]
        time.sleep(0.02)
    raise AssertionError("no leader")


def _log(svc):
    recs, nxt = [], 1
    while True:
        got, n2 = svc.read(nxt, 8 << 20, stale=True)
        recs += got
        if n2 == nxt:
            return [(r.lsn, r.data[12:]) for r in recs]
        nxt = n2


def test_append_each_returns_every_lsn_and_a_retried_call_stores_nothing_twice(tmp_path):
    svcs, peers = _group(tmp_path)
    c = connect_logservice(",".join(peers.values()), deadline=20.0)
    try:
        lead = _leader(svcs)
        lsns = c.append_each([b"a%d" % k for k in range(50)])
        assert lsns == list(range(lsns[0], lsns[0] + 50))  # one proposal batch: consecutive indexes
        c.get_tso_timestamp(1)  # an internal entry between calls
        first = c.append_many([b"b0", b"b1"])
        # the same call again (a retry after a lost reply): the original LSNs, nothing stored twice
        raw = connect_replica(REPLICATED_SERVICE, peers[lead], timeout=5.0)
        req = pb.RAppendManyRequest(client=1 << 40, first_seq=1, type=0, data=[b"\0" * 12 + b"c%d" % k for k in range(5)])
        once = list(raw.invoke("AppendMany", req).lsns)
        again = list(raw.invoke("AppendMany", req).lsns)
        raw.close()
        assert once == again
        want = dict(zip([b"a%d" % k for k in range(50)], lsns))
        want.update({b"b0": first, b"b1": first + 1})
        want.update({b"c%d" % k: lsn for k, lsn in enumerate(once)})
        end = time.monotonic() + 10
        while any(s.node.applied < svcs[lead].node.status()["commit"] for s in svcs.values()):
            assert time.monotonic() < end
            time.sleep(0.02)
        logs = [_log(s) for s in svcs.values()]
        assert logs[0] == logs[1] == logs[2]
        assert dict((d, lsn) for lsn, d in logs[0]) == want and len(logs[0]) == len(want)
        try:
            c.append_each([])
        except InvalidArgument:
            pass
        else:
            raise AssertionError("an empty append_each was accepted")
    finally:
        c.close()
        for s in svcs.values():
            s.close()


def test_batches_in_flight_when_the_leader_stops_are_stored_exactly_once(tmp_path):
    svcs, peers = _group(tmp_path)
    acked, errors, stop = {}, [], threading.Event()

    def writer(w):
        c = connect_logservice(",".join(peers.values()), deadline=15.0, call_timeout=1.0)
        k = 0
        while not stop.is_set():
            batch = [b"w%d-%d-%d" % (w, k, j) for j in range(8)]
            k += 1
            try:
                acked.update(zip(batch, c.append_each(batch)))
            except NoLeaderError:
                pass
            except Exception as exc:  # noqa: BLE001 - e.g. a retried batch refused: reported below
                errors.append(exc)
                break
        c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    try:
        old = _leader(svcs)
        for t in threads:
            t.start()
        time.sleep(0.5)
        svcs.pop(old).close()  # batches in flight on it: the clients retry them on the next leader
        _leader(svcs)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    try:
        assert not errors, f"a writer failed: {errors[0]!r}"
        assert len(acked) > 50
        lead = _leader(svcs)
        svcs[lead].read(1, 1)  # a ReadIndex barrier: the leader committed in its term
        target = svcs[lead].node.status()["commit"]
        end = time.monotonic() + 10
        while any(s.node.applied < target for s in svcs.values()):
            assert time.monotonic() < end
            time.sleep(0.02)
        logs = [[(lsn, d) for lsn, d in _log(s) if lsn <= target] for s in svcs.values()]
        assert logs[0] == logs[1]
        at = {}
        for lsn, d in logs[0]:
            assert d not in at, f"{d!r} stored twice (LSNs {at[d]} and {lsn})"
            at[d] = lsn
        bad = {d: (lsn, at.get(d)) for d, lsn in acked.items() if at.get(d) != lsn}
        assert not bad, f"acknowledged records not at their LSN (acked, in the log): {dict(list(bad.items())[:8])}"
    finally:
        for s in svcs.values():
            s.close()


def test_the_client_speaks_either_carrier(tmp_path):
    """The framed carrier by default; carrier="grpc" to the replicas' gRPC ports (`--grpc-listen`):
    the same log, appends of either exactly once, each at its LSN."""
    from logtide.engine.nodehost.channel import ReplicaTransport
    from logtide.engine.rpc.wire_client import WireTransport
    svcs, peers = _group(tmp_path, grpc=True)
    wire = connect_logservice(",".join(peers.values()), deadline=20.0)
    grpc = connect_logservice(",".join(s.grpc_address for s in svcs.values()), carrier="grpc", deadline=20.0)
    try:
        assert all(isinstance(c.transport, WireTransport) for c in wire._clients.values())
        assert all(isinstance(c.transport, ReplicaTransport) for c in grpc._clients.values())
        lead = _leader(svcs)
        a = wire.append_each([b"w%d" % k for k in range(20)])
        b = grpc.append_each([b"g%d" % k for k in range(20)])
        c1, c2 = wire.append(b"w-one"), grpc.append(b"g-one")
        assert grpc.get_latest_lsn() == wire.get_latest_lsn() == c2 > c1 > b[-1] > a[-1]
        want = {**{b"w%d" % k: lsn for k, lsn in enumerate(a)}, **{b"g%d" % k: lsn for k, lsn in enumerate(b)},
                b"w-one": c1, b"g-one": c2}
        for client in (wire, grpc):
            recs, _ = client.read(1, 8 << 20)
            assert {r.payload: r.lsn for r in recs} == want
        assert _log(svcs[lead]) == sorted((lsn, d) for d, lsn in want.items())
    finally:
        wire.close()
        grpc.close()
        for s in svcs.values():
            s.close()
