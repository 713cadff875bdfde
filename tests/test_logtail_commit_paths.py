"""The TN's two commit-check paths and the group committer's chained wake-ups, against simple models.

A commit of at most SMALL_TXN_KEYS keys is checked and reserved one B-tree call per key, a larger one
with numpy batch calls. Transactions of both sizes, over one small key space so that they collide,
must give the serial model's outcome (write-write conflict, missing key, duplicate key), take commit
ts in commit order, leave the logtail in ts order, and leave the model's rows (also after a reopen,
from the log). The group committer is driven by many threads: every item is flushed exactly once, in
ticket order, before its writer returns; a failed flush fails its group and everything after it.
"""
import threading
import time

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.group_commit import GroupCommitter
from logtide.engine.logservice import LogService
from logtide.engine.logtail import TransactionNode
from logtide.engine.logtail.tn import SMALL_TXN_KEYS
from logtide.engine.objectstore import ObjectStore
from logtide.errors import DuplicateKeyError, GroupCommitFailed, KeyNotFoundError, WriteConflictError

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
steps = st.lists(st.one_of(
    st.tuples(st.just("begin"), st.integers(0, TXNS - 1), st.just(frozenset())),
    st.tuples(st.sampled_from(["insert", "delete", "update"]), st.integers(0, TXNS - 1), keysets),
    st.tuples(st.just("commit"), st.integers(0, TXNS - 1), st.just(frozenset())),
), min_size=5, max_size=30)


def _rows_of(tn):
    rows = {}
    for e in tn.pull("t", 0)["entries"]:
        if e.kind == "insert":
            rows.update(zip(e.batch.column("id").to_pylist(), e.batch.column("v").to_pylist()))
        elif e.kind == "delete":
            for pk in e.batch.column("__pk").to_pylist():
                rows.pop(pk)
    return rows


@scaled(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=steps)
# found with 10x examples (issue 23): a refused insert left its first keys in the transaction
@example(schedule=[("begin", 0, frozenset()), ("insert", 0, frozenset({1})), ("insert", 0, frozenset({0, 1})),
                   ("insert", 0, frozenset({0})), ("update", 0, frozenset({0})), ("commit", 0, frozenset())])
def test_small_and_large_commits_match_the_serial_model(tmp_path_factory, schedule):
    d = tmp_path_factory.mktemp("tn")
    log = LogService.open(d / "log", fsync="never", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(d / "objects"), heartbeat_ms=50)
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        rows, last_write, clock = {}, {}, 0
        open_txns: dict[int, tuple] = {}
        committed, val = [], 0
        for kind, k, keys in schedule:
            keys = sorted(keys)
            if kind == "begin":
                if k not in open_txns:
                    clock += 1
                    open_txns[k] = (tn.begin(), clock, {}, set())
            elif kind == "commit":
                if k not in open_txns:
                    continue
                real, start, ins, dels = open_txns.pop(k)
                want, clock = _model_commit(rows, last_write, clock, start, ins, dels)
                try:
                    got = real.commit()
                except (WriteConflictError, KeyNotFoundError, DuplicateKeyError) as exc:
                    assert type(exc) is want, (schedule, want, exc)
                    continue
                assert want in ("ok", "noop"), (schedule, want)
                if want == "ok":
                    committed.append(got)
            elif k in open_txns:
                real, _, ins, dels = open_txns[k]
                vals = list(range(val + 1, val + 1 + len(keys)))
                val += len(keys)
                if kind == "insert":
                    if any(pk in ins for pk in keys):
                        with pytest.raises(DuplicateKeyError):
                            real.insert("t", {"id": keys, "v": vals})
                        continue
                    real.insert("t", {"id": keys, "v": vals})
                    ins.update(zip(keys, vals))
                elif kind == "delete":
                    real.delete("t", keys)
                    for pk in keys:
                        if pk in ins:
                            del ins[pk]
                        else:
                            dels.add(pk)
                else:
                    real.update("t", {"id": keys, "v": vals})
                    for pk, v in zip(keys, vals):
                        if pk not in ins:
                            dels.add(pk)
                        ins[pk] = v
        assert committed == sorted(committed) and len(set(committed)) == len(committed)
        assert [ts for ts, _, _ in tn.logtail.visit(0, tn.last_ts, "t")] == committed
        assert _rows_of(tn) == rows
    finally:
        tn.close()
        log.close()
    # the log alone rebuilds the same rows and the same key checks
    log = LogService.open(d / "log", fsync="never", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(d / "objects"), heartbeat_ms=50)
    try:
        assert _rows_of(tn) == rows
        for pk in range(KEYS):
            x = tn.begin()
            x.insert("t", {"id": [pk], "v": [0]})
            if pk in rows:
                with pytest.raises(DuplicateKeyError):
                    x.commit()
    finally:
        tn.close()
        log.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("fail_at", [None, 40])
def test_group_committer_flushes_each_item_once_in_order(fail_at, chain):
    """32 writers queue under their own ordering lock and wait; the flushes see every ticket once,
    in order, and each writer returns only after its item was flushed (or fails with the group);
    with the settled writers woken as a chain (the TN) or all at once (the primary)."""
    flushed: list[int] = []
    flushes = [0]

    def flush(group):
        flushes[0] += 1
        time.sleep(0.001)      # an fsync's time, with the GIL released: writers queue behind the group
        if fail_at is not None and group[0] <= fail_at <= group[-1]:
            raise OSError("disk gone")
        flushed.extend(group)

    gc = GroupCommitter(flush, timeout=60, chain=chain)
    order = threading.Lock()
    next_item = [0]
    acked: list[tuple[int, bool]] = []
    failed: list[int] = []
    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(60):
                with order:
                    next_item[0] += 1
                    item = next_item[0]
                    try:
                        ticket = gc.enqueue(item)
                    except GroupCommitFailed:
                        failed.append(item)
                        return
                try:
                    gc.wait(ticket)
                except (GroupCommitFailed, OSError):
                    failed.append(item)
                    return
                acked.append((item, item in set(flushed)))
        except BaseException as exc:  # noqa: B902 - reported below
            errors.append(exc)

    ths = [threading.Thread(target=writer) for _ in range(32)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(100)
    assert not errors and not any(th.is_alive() for th in ths)
    assert all(was_flushed for _, was_flushed in acked)
    assert flushed == list(range(1, len(flushed) + 1))        # each once, in ticket order
    if fail_at is None:
        assert len(flushed) == 32 * 60 and not failed
        assert gc.items == 32 * 60 and gc.groups == flushes[0] < gc.items
    else:
        assert gc.failed is not None
        assert fail_at not in flushed and max(flushed, default=0) < fail_at
        assert sorted(i for i, _ in acked) == flushed
        # every writer ends on exactly one failed item: the failed group's, or one queued after it
        assert len(failed) == 32 and fail_at in failed and set(failed).isdisjoint(flushed)
        assert min(failed) == max(flushed, default=0) + 1     # the failed group starts after the last flushed


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
