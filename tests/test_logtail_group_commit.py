"""TN group commit against a simple serial model.

Commits are pipelined: a commit takes its ts and reserves its keys under the commit lock, and is made
durable later with other commits in one log append. The schedules below start each commit in its own
thread and go on as soon as it is queued (before it is durable), so several commits are in flight at
once; the model executes the same schedule one step at a time. Write-write conflicts, missing and
duplicate keys, the final rows, the logtail order and the push stream order must all match it.
"""
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logservice import LogService
from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.logtail.transport import encode_request
from logtide.engine.objectstore import ObjectStore
from logtide.errors import DuplicateKeyError, KeyNotFoundError, WriteConflictError

KEYS = 3
TXNS = 3


class ModelTxn:
    def __init__(self, start: int) -> None:
        self.start = start
        self.ins: dict[int, int] = {}
        self.dels: set[int] = set()


class Model:
    """Serial execution: every step applies at once, commits in schedule order (= ts order)."""

    def __init__(self) -> None:
        self.clock = 0
        self.rows: dict[int, int] = {}
        self.last_write: dict[int, int] = {}

    def begin(self) -> ModelTxn:
        self.clock += 1
        return ModelTxn(self.clock)

    def commit(self, t: ModelTxn):
        touched = list(t.ins) + list(t.dels)
        if not touched:
            return "noop"
        if any(self.last_write.get(pk, 0) > t.start for pk in touched):
            return WriteConflictError
        if any(pk not in self.rows for pk in t.dels):
            return KeyNotFoundError
        if any(pk in self.rows and pk not in t.dels for pk in t.ins):
            return DuplicateKeyError
        self.clock += 1
        for pk in t.dels:
            del self.rows[pk]
        self.rows.update(t.ins)
        for pk in touched:
            self.last_write[pk] = self.clock
        return "ok"


# small key and transaction spaces, so that transactions overlap and collide often
steps = st.lists(st.one_of(
    st.tuples(st.just("begin"), st.integers(0, TXNS - 1)),
    st.tuples(st.sampled_from(["insert", "insert", "delete", "update"]), st.integers(0, TXNS - 1),
              st.integers(0, KEYS - 1)),
    st.tuples(st.just("commit"), st.integers(0, TXNS - 1)),
    st.tuples(st.just("settle"), st.just(0)),
), min_size=10, max_size=60)


def _start_commit(tn, txn, outcomes, i):
    """Commit in a thread; return once the commit is queued (or finished without queueing)."""
    before = tn.committer.queued
    done = threading.Event()

    def run():
        try:
            outcomes[i] = ("ok", txn.commit())
        except (WriteConflictError, KeyNotFoundError, DuplicateKeyError) as exc:
            outcomes[i] = (type(exc), None)
        finally:
            done.set()
    th = threading.Thread(target=run)
    th.start()
    deadline = time.monotonic() + 20
    while tn.committer.queued == before and not done.is_set():
        assert time.monotonic() < deadline, "a commit neither queued nor finished"
        time.sleep(0.0002)
    return th


@scaled(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=steps)
# a write-write conflict with a commit that is queued but maybe not yet durable
@example(schedule=[("begin", 0), ("begin", 1), ("insert", 0, 1), ("commit", 0), ("insert", 1, 1), ("commit", 1)])
# a commit that began after another was queued sees its keys (duplicate), and its delete (missing)
@example(schedule=[("begin", 0), ("insert", 0, 2), ("commit", 0), ("begin", 1), ("insert", 1, 2), ("commit", 1),
                   ("begin", 2), ("delete", 2, 2), ("commit", 2), ("begin", 0), ("delete", 0, 2), ("commit", 0)])
def test_pipelined_commits_match_the_serial_model(tmp_path_factory, schedule):
    d = tmp_path_factory.mktemp("tn")
    log = LogService.open(d / "log", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(d / "objects"), heartbeat_ms=1)
    stream = None
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        stream = tn.connect("raw")
        stream.send_to_tn(encode_request("subscribe", "t"))
        deadline = time.monotonic() + 20
        while (m := stream.cn_recv(timeout=1)) is None or m[0] != "subscribed":   # every commit after it is pushed
            assert time.monotonic() < deadline, "no subscribe response"
        model = Model()
        open_txns: dict[int, tuple] = {}
        outcomes: dict[int, tuple] = {}
        expect: dict[int, object] = {}
        threads = []
        val = 0
        for i, step in enumerate(schedule):
            kind, k = step[0], step[1]
            if kind == "begin":
                if k not in open_txns:
                    open_txns[k] = (tn.begin(), model.begin())
            elif kind in ("insert", "delete", "update"):
                if k not in open_txns:
                    continue
                real, mt = open_txns[k]
                pk = step[2]
                val += 1
                if kind == "insert":
                    if pk in mt.ins:
                        with pytest.raises(DuplicateKeyError):
                            real.insert("t", {"id": [pk], "v": [val]})
                        continue
                    real.insert("t", {"id": [pk], "v": [val]})
                    mt.ins[pk] = val
                elif kind == "delete":
                    real.delete("t", [pk])
                    if pk in mt.ins:
                        del mt.ins[pk]
                    else:
                        mt.dels.add(pk)
                else:
                    real.update("t", {"id": [pk], "v": [val]})
                    if pk not in mt.ins:
                        mt.dels.add(pk)
                    mt.ins[pk] = val
            elif kind == "commit":
                if k not in open_txns:
                    continue
                real, mt = open_txns.pop(k)
                expect[i] = model.commit(mt)
                threads.append(_start_commit(tn, real, outcomes, i))
            else:   # settle: every commit in flight becomes durable
                for th in threads:
                    th.join(30)
        for th in threads:
            th.join(30)
            assert not th.is_alive()
        committed = []
        for i, want in expect.items():
            got, ts = outcomes[i]
            if want in ("ok", "noop"):
                assert got == "ok", (schedule, i, got)
                if want == "ok":
                    committed.append(ts)
            else:
                assert got is want, (schedule, i, got, want)
        # commit ts follow schedule order; the logtail holds exactly them, in ts order
        assert committed == sorted(committed) and len(set(committed)) == len(committed)
        handles = [ts for ts, _, _ in tn.logtail.visit(0, tn.last_ts, "t")]
        assert handles == committed
        # rows as the model has them
        resp = tn.pull("t", 0)
        rows: dict[int, int] = {}
        for e in resp["entries"]:
            if e.kind == "insert":
                rows.update(zip(e.batch.column("id").to_pylist(), e.batch.column("v").to_pylist()))
            else:
                for pk in e.batch.column("__pk").to_pylist():
                    rows.pop(pk)
        assert rows == model.rows
        # the push stream: contiguous (from, to] ranges, every commit exactly once, in ts order
        pushed, last_to = [], None
        deadline = time.monotonic() + 20
        while last_to is None or last_to < tn.last_ts:
            assert time.monotonic() < deadline, "the push stream stalled"
            m = stream.cn_recv(timeout=1)
            if m is None or m[0] != "update":
                continue
            _, frm, to, tables = m
            if last_to is not None:
                assert frm == last_to
            assert to > frm
            for e in tables.get("t", []):     # merged: one batch per kind, each row with its ts
                row_ts = sorted(set(e.batch.column("__ts").to_pylist()))
                assert frm < row_ts[0] and row_ts[-1] <= to and e.ts == row_ts[-1]
                pushed += row_ts
            last_to = to
        assert sorted(set(pushed)) == committed
    finally:
        if stream is not None:
            stream.close()
        tn.close()
        log.close()


@pytest.mark.timeout(120)
def test_sixteen_committers_share_fsyncs_and_push_in_order(tmp_path):
    log = LogService.open(tmp_path / "log", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(tmp_path / "objects"))
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    tn.create_table("hot", {"id": "int64", "v": "int64"}, "id")
    hot = tn.begin()
    hot.insert("hot", {"id": np.arange(4), "v": np.zeros(4, dtype=np.int64)})
    hot.commit()
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    cn.subscribe("t")
    raw = tn.connect("raw")
    raw.send_to_tn(encode_request("subscribe", "t"))
    deadline = time.monotonic() + 20
    while (m := raw.cn_recv(timeout=1)) is None or m[0] != "subscribed":   # updates after it are complete
        assert time.monotonic() < deadline, "no subscribe response"
    seen: list[int] = []
    cn.on_update = seen.append
    per_thread = 60
    acked: dict[int, list] = {}
    hot_ok: list[tuple] = []       # (pk, start ts, commit ts)
    hot_lost: list[tuple] = []     # (pk, start ts)

    def worker(k):
        mine = acked.setdefault(k, [])
        for i in range(per_thread):
            x = tn.begin()
            x.insert("t", {"id": [k * 1000 + i], "v": [i]})
            mine.append(x.commit())
            # a contended row: exactly one of the writers that began before it was written may win
            y = tn.begin()
            y.update("hot", {"id": [i % 4], "v": [k]})
            try:
                hot_ok.append((i % 4, y.start_ts, y.commit()))
            except WriteConflictError:
                hot_lost.append((i % 4, y.start_ts))
    ths = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    try:
        for th in ths:
            th.start()
        for th in ths:
            th.join(90)
        assert not any(th.is_alive() for th in ths)
        all_ts = sorted(ts for v in acked.values() for ts in v)
        assert len(set(all_ts)) == 16 * per_thread
        # fewer fsyncs than commits: the appends of concurrent commits shared groups
        assert tn.committer.items > tn.committer.groups
        assert log.stats()["groups"] < tn.committer.items
        deadline = time.monotonic() + 30
        while not seen or seen[-1] < all_ts[-1]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert seen == sorted(seen)
        # push batching: each update carries one insert batch for "t", holding every commit in it
        inserts, to_ts = [], 0
        while to_ts < all_ts[-1]:
            m = raw.cn_recv(timeout=10)
            assert m is not None, "the push stream stalled"
            if m[0] != "update":
                continue
            to_ts = m[2]
            if "t" in m[3]:
                es = m[3]["t"]
                assert [e.kind for e in es] == ["insert"]
                inserts.append(len(set(es[0].batch.column("__ts").to_pylist())))
        assert sum(inserts) == 16 * per_thread and max(inserts) > 1
        rows = cn.read("t", all_ts[-1]).to_pylist()
        assert {r["id"] for r in rows} == {k * 1000 + i for k in range(16) for i in range(per_thread)}
        # the hot rows: each write that went through began after the previous write to its row
        # committed (no lost update), and each refused one had a write to its row after it began
        for pk in range(4):
            ok = sorted((ts, start) for p, start, ts in hot_ok if p == pk)
            for (prev_ts, _), (_, start) in zip(ok, ok[1:]):
                assert start > prev_ts
            for p, start in hot_lost:
                if p == pk:
                    assert any(ts > start for ts, _ in ok)
        assert hot_ok
        hot_h = [ts for ts, _, _ in tn.logtail.visit(0, tn.last_ts, "hot")]
        assert hot_h[1:] == sorted(ts for _, _, ts in hot_ok)
    finally:
        raw.close()
        cn.close()
        tn.close()
        log.close()
