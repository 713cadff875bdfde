"""The TN's two commit-check paths, against a serial model.

A commit of at most SMALL_TXN_KEYS keys is checked and reserved one B-tree call per key, a larger one
with numpy batch calls. Transactions of both sizes, over one small key space so that they collide,
must give the serial model's outcome (write-write conflict, missing key, duplicate key), take commit
ts in commit order, leave the logtail in ts order, and leave the model's rows (also after a reopen,
from the log).
"""
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_profiles import scaled

from logtide.engine.logservice import LogService
from logtide.engine.logtail import TransactionNode
from logtide.engine.logtail.tn import SMALL_TXN_KEYS
from logtide.engine.objectstore import ObjectStore
from logtide.errors import (DuplicateKeyError, KeyNotFoundError, SchemaError, UnknownTableError,
                            WriteConflictError)

KEYS = 48
TXNS = 3


def _model_commit(rows, last_write, clock, start, ins, dels):
    """Serial model: (outcome, new clock)."""
    touched = list(ins) + list(dels)
    if not touched:
        return "noop", clock
    if any(last_write.get(pk, 0) > start for pk in touched):
        return WriteConflictError, clock
    if any(pk not in rows for pk in dels):
        return KeyNotFoundError, clock
    if any(pk in rows and pk not in dels for pk in ins):
        return DuplicateKeyError, clock
    clock += 1
    for pk in dels:
        del rows[pk]
    rows.update(ins)
    for pk in touched:
        last_write[pk] = clock
    return "ok", clock


keysets = st.one_of(st.sets(st.integers(0, KEYS - 1), min_size=1, max_size=3),                 # small path
                    st.sets(st.integers(0, KEYS - 1), min_size=SMALL_TXN_KEYS + 1, max_size=KEYS))  # numpy path
slots = st.integers(0, TXNS - 1)


def _rows_of(tn):
    rows = {}
    for e in tn.pull("t", 0)["entries"]:
        if e.kind == "insert":
            rows.update(zip(e.batch.column("id").to_pylist(), e.batch.column("v").to_pylist()))
        elif e.kind == "delete":
            for pk in e.batch.column("__pk").to_pylist():
                rows.pop(pk)
    return rows


class CommitPathsMachine(RuleBasedStateMachine):
    """Up to TXNS interleaved transactions on one table against the serial model. Calls the TN
    refuses (a key inserted twice, wrong columns or types, non-integer keys, an unknown table) are
    made inside open transactions and must leave them as they were: the commit holds exactly the
    calls that returned."""

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lttn"))
        self.tn = self._open()
        self.tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        self.rows, self.last_write, self.clock = {}, {}, 0
        self.open_txns: dict[int, tuple] = {}       # slot -> (txn, start, model inserts, model deletes)
        self.committed: list[int] = []
        self.val = 0

    def _open(self):
        self.log = LogService.open(self.dir / "log", fsync="never", truncation_interval=0)
        return TransactionNode(self.log, ObjectStore(self.dir / "objects"), heartbeat_ms=50)

    def _close(self):
        self.tn.close()
        self.log.close()

    def _vals(self, n):
        self.val += n
        return list(range(self.val - n + 1, self.val + 1))

    @precondition(lambda self: len(self.open_txns) < TXNS)
    @rule(k=slots)
    def begin(self, k):
        if k not in self.open_txns:
            self.clock += 1
            self.open_txns[k] = (self.tn.begin(), self.clock, {}, set())

    @precondition(lambda self: self.open_txns)
    @rule(k=slots, keys=keysets)
    def insert(self, k, keys):
        real, _, ins, _ = self.open_txns[sorted(self.open_txns)[k % len(self.open_txns)]]
        keys, vals = sorted(keys), self._vals(len(keys))
        if any(pk in ins for pk in keys):
            with pytest.raises(DuplicateKeyError):
                real.insert("t", {"id": keys, "v": vals})
            return
        real.insert("t", {"id": keys, "v": vals})
        ins.update(zip(keys, vals))

    @precondition(lambda self: self.open_txns)
    @rule(k=slots, keys=keysets)
    def delete(self, k, keys):
        real, _, ins, dels = self.open_txns[sorted(self.open_txns)[k % len(self.open_txns)]]
        real.delete("t", sorted(keys))
        for pk in keys:
            if pk in ins:
                del ins[pk]
            else:
                dels.add(pk)

    @precondition(lambda self: self.open_txns)
    @rule(k=slots, keys=keysets)
    def update(self, k, keys):
        real, _, ins, dels = self.open_txns[sorted(self.open_txns)[k % len(self.open_txns)]]
        keys, vals = sorted(keys), self._vals(len(keys))
        real.update("t", {"id": keys, "v": vals})
        for pk, v in zip(keys, vals):
            if pk not in ins:
                dels.add(pk)
            ins[pk] = v

    @precondition(lambda self: self.open_txns)
    @rule(k=slots, keys=keysets, how=st.sampled_from(["twice", "dup", "type", "columns", "float", "u64", "table"]))
    def refused(self, k, keys, how):
        """A call the TN refuses, inside an open transaction: it changes nothing."""
        real, _, ins, _ = self.open_txns[sorted(self.open_txns)[k % len(self.open_txns)]]
        keys = sorted(keys)
        calls = {
            "twice": (DuplicateKeyError, lambda: real.insert("t", {"id": keys + keys[:1], "v": self._vals(len(keys) + 1)})),
            "dup": (DuplicateKeyError, lambda: real.insert("t", {"id": keys + sorted(ins)[:1],
                                                                 "v": self._vals(len(keys) + 1)})),
            "type": (SchemaError, lambda: real.insert("t", {"id": keys, "v": [str(v) for v in keys]})),
            "columns": (SchemaError, lambda: real.update("t", {"id": keys})),
            "float": (SchemaError, lambda: real.delete("t", [pk + 0.5 for pk in keys])),
            "u64": (SchemaError, lambda: real.delete("t", np.array(keys + [1 << 63], dtype=np.uint64))),
            "table": (UnknownTableError, lambda: real.insert("nope", {"id": keys, "v": keys})),
        }
        if how == "dup" and (not ins or any(pk in ins for pk in keys)):
            how = "twice"
        err, call = calls[how]
        with pytest.raises(err):
            call()

    @precondition(lambda self: self.open_txns)
    @rule(k=slots)
    def commit(self, k):
        slot = sorted(self.open_txns)[k % len(self.open_txns)]
        real, start, ins, dels = self.open_txns.pop(slot)
        want, self.clock = _model_commit(self.rows, self.last_write, self.clock, start, ins, dels)
        try:
            got = real.commit()
        except (WriteConflictError, KeyNotFoundError, DuplicateKeyError) as exc:
            assert type(exc) is want, (want, exc)
            return
        assert want in ("ok", "noop"), want
        if want == "ok":
            self.committed.append(got)

    @precondition(lambda self: self.open_txns)
    @rule(k=slots)
    def rollback(self, k):
        real, *_ = self.open_txns.pop(sorted(self.open_txns)[k % len(self.open_txns)])
        real.rollback()

    @rule()
    def reopen(self):
        """The log alone rebuilds the same rows and the same key checks (open transactions are lost)."""
        self.open_txns.clear()
        self._close()
        self.tn = self._open()
        self.committed = [ts for ts, _, _ in self.tn.logtail.visit(0, self.tn.last_ts, "t")]
        assert _rows_of(self.tn) == self.rows
        for pk in range(0, KEYS, 5):
            x = self.tn.begin()
            x.insert("t", {"id": [pk], "v": [0]})
            if pk in self.rows:
                with pytest.raises(DuplicateKeyError):
                    x.commit()
            else:
                x.rollback()
        self.clock += 1      # the probes' begins took ts: later transactions start after every commit

    @invariant()
    def matches_the_serial_model(self):
        assert self.committed == sorted(self.committed) and len(set(self.committed)) == len(self.committed)
        assert [ts for ts, _, _ in self.tn.logtail.visit(0, self.tn.last_ts, "t")] == self.committed
        assert _rows_of(self.tn) == self.rows

    def teardown(self):
        self._close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestCommitPathsMachine = CommitPathsMachine.TestCase
TestCommitPathsMachine.settings = scaled(max_examples=60, stateful_step_count=30, deadline=None)


def test_commit_paths_machine_found_at_10x():
    """Issue 23's schedule (10x examples): an insert refused for key 1 kept key 0 in the
    transaction, refusing a later insert of 0 and letting an update create it. Kept as a plain
    test: hypothesis has no @example for state machines."""
    m = CommitPathsMachine()
    try:
        m.begin(k=0)
        for step in (lambda: m.insert(k=0, keys={1}), lambda: m.insert(k=0, keys={0, 1}),
                     lambda: m.insert(k=0, keys={0}), lambda: m.update(k=0, keys={0}), lambda: m.commit(k=0)):
            step()
            m.matches_the_serial_model()
    finally:
        m.teardown()


@scaled(max_examples=150, deadline=None)
@given(gaps=st.lists(st.integers(1, 4), max_size=200), page=st.integers(1, 9),
       chunks=st.lists(st.integers(1, 12), min_size=1, max_size=60), bad=st.booleans())
def test_logtail_append_many_matches_one_append_per_handle(gaps, page, chunks, bad):
    """A group's handles appended under one lock (append_many) give the same pages, ranges and
    first ts as one append per handle; a group whose ts do not grow is refused whole."""
    from logtide.engine.logtail.logtail_table import Handle, LogtailTable
    one, many = LogtailTable(page_size=page), LogtailTable(page_size=page)
    ts, handles = 0, []
    for g in gaps:
        ts += g
        handles.append(Handle(ts, {"t": [ts]}))
    for h in handles:
        one.append(h)
    k, c = 0, 0
    while k < len(handles):
        n = chunks[c % len(chunks)]
        many.append_many(handles[k:k + n])
        k, c = k + n, c + 1
    assert len(one) == len(many) == len(handles) and one.first_ts() == many.first_ts()
    p1, b1, n1 = one.snapshot()
    p2, b2, n2 = many.snapshot()
    assert b1 == b2 and n1 == n2 and [p.ts for p in p1] == [p.ts for p in p2]
    for lo in range(0, ts + 2, max(1, ts // 7)):
        assert list(one.visit(lo, ts)) == list(many.visit(lo, ts))
    if bad and handles:
        before = len(many)
        with pytest.raises(ValueError):
            many.append_many([Handle(ts + 5, {}), Handle(ts + 5, {})])
        with pytest.raises(ValueError):
            many.append_many([Handle(ts, {})])
        assert len(many) == before and many.snapshot()[1] == b2
