"""The TN's small-insert commit in C (_ext/tn_txn.pyx, _ext/small_insert.pyx) against the Python commit path.

check_inserts must raise what commit_check.check_small raises for the same keys and state, and
change nothing; reserve_and_encode must reserve the row ids TableState.alloc_rowids gives, index
the keys as the Python path does, and write the log record logtail_format.encode writes for the
same batch, byte for byte. End to end, a TN whose commits take this path must recover (from the
log) the rows it acknowledged; tests/test_logtail_commit_paths.py runs it against a serial model.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide._ext.small_insert import check_inserts, reserve_and_encode
from logtide.engine.logservice import LogService
from logtide.engine.logtail import TransactionNode
from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.column_batch import ColumnBatch
from logtide.engine.logtail.commit_check import SMALL_TXN_KEYS, check_small
from logtide.engine.logtail.tn_table import TableState
from logtide.engine.objectstore import BLOCK_ROWS, ObjectStore
from logtide.errors import DuplicateKeyError, WriteConflictError

# every column dtype a table may have except bool (its layout is not written by concatenation)
DTYPES = ["<i8", "<i4", "<i2", "i1", "<u8", "<u4", "<u2", "u1", "<f8", "<f4", "<f2"]


def _outcome(f):
    try:
        f()
    except (WriteConflictError, DuplicateKeyError) as exc:
        return type(exc), str(exc)
    return None


@scaled(max_examples=150, deadline=None)
@given(written=st.dictionaries(st.integers(-5, 20), st.integers(1, 30), max_size=20),
       present=st.sets(st.integers(-5, 20), max_size=20),
       keys=st.lists(st.integers(-5, 20), min_size=1, max_size=SMALL_TXN_KEYS, unique=True),
       start_ts=st.integers(0, 31))
def test_check_inserts_raises_what_check_small_raises(written, present, keys, start_ts):
    tdef = TableDef.make("t", {"id": "int64"}, "id")
    state = TableState(tdef)
    for pk, ts in written.items():
        state.pk_ts.insert(pk, ts)
    for pk in present:
        state.pk_index.insert(pk, pk + 100)
    pks = np.array(keys, dtype=np.int64)
    before = (list(state.pk_ts.items()), list(state.pk_index.items()))
    want = _outcome(lambda: check_small("t", state, pks, set(), start_ts))
    got = _outcome(lambda: check_inserts("t", state.pk_ts, state.pk_index, pks, start_ts))
    assert got == want
    assert (list(state.pk_ts.items()), list(state.pk_index.items())) == before


@scaled(max_examples=150, deadline=None)
@given(dtypes=st.lists(st.sampled_from(DTYPES), max_size=4), n=st.integers(1, SMALL_TXN_KEYS),
       block=st.integers(0, 1 << 40), off=st.integers(0, BLOCK_ROWS - 1), ts=st.integers(1, (1 << 63) - 1),
       name=st.text(min_size=1, max_size=8).filter(lambda s: not s.startswith("__")),
       strided=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_reserve_and_encode_is_the_python_path(dtypes, n, block, off, ts, name, strided, seed):
    n = min(n, BLOCK_ROWS - off)
    columns = {"id": "int64", **{f"c{i}": d for i, d in enumerate(dtypes)}}
    tdef = TableDef.make(name, columns, "id")
    rng = np.random.default_rng(seed)
    rows = {"id": rng.choice(1 << 40, n, replace=False).astype(np.int64)}
    for c, d in columns.items():
        if c != "id":
            rows[c] = (rng.integers(0, 100, n * 2)[::2] if strided else rng.integers(0, 100, n)).astype(d)
    if strided:
        rows["id"] = np.repeat(rows["id"], 2)[::2]
    cols = tdef.coerce(rows)
    fast, slow = TableState(tdef), TableState(tdef)
    for s in (fast, slow):
        s.cur_block, s.next_block, s.cur_off = block, block + 1, off
    layout = fast.insert_layout
    user = [cols[c] for c in layout.names[3:]]

    payload, arrays = reserve_and_encode(fast, layout, layout.batch_metadata(n), fast.json_name, cols["id"],
                                         user, ts, BLOCK_ROWS, fmt.HEADER, fmt.MAGIC, fmt.COMMIT)

    blocks, offs = slow.alloc_rowids(n)
    want = [blocks, offs, np.full(n, ts, dtype=np.int64), *user]
    assert all(a.dtype == w.dtype and np.array_equal(a, w) for a, w in zip(arrays, want, strict=True))
    rec = fmt.Record(fmt.COMMIT, ts, {}, [(name, fmt.INSERT, ColumnBatch(layout, want))])
    assert payload == fmt.encode(rec)
    back = fmt.decode(payload)
    assert back.ts == ts and [(t, k) for t, k, _ in back.batches] == [(name, fmt.INSERT)]
    assert back.batches[0][2].column("id").to_pylist() == cols["id"].tolist()
    assert fast.cur_off == slow.cur_off
    rowids = (blocks * BLOCK_ROWS + offs).tolist()
    assert list(fast.pk_index.items()) == sorted(zip(cols["id"].tolist(), rowids))
    assert list(fast.pk_ts.items()) == sorted((pk, ts) for pk in cols["id"].tolist())


def test_reserve_and_encode_refuses_rows_past_the_block_and_changes_nothing():
    tdef = TableDef.make("t", {"id": "int64"}, "id")
    state = TableState(tdef)
    state.cur_block, state.cur_off = 3, BLOCK_ROWS - 1
    pks = np.array([1, 2], dtype=np.int64)
    with pytest.raises(ValueError):
        reserve_and_encode(state, state.insert_layout, state.insert_layout.batch_metadata(2), state.json_name,
                           pks, [pks], 5, BLOCK_ROWS, fmt.HEADER, fmt.MAGIC, fmt.COMMIT)
    assert (state.cur_off, len(state.pk_index), len(state.pk_ts)) == (BLOCK_ROWS - 1, 0, 0)


def test_small_inserts_across_a_block_boundary_recover(tmp_path):
    """Single-row commits (C path) and the commit that opens each block (Python path) interleave; a
    refused duplicate changes nothing; the reopened TN has every acknowledged row at its row id."""
    log = LogService.open(tmp_path / "log", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(tmp_path / "objects"))
    tn.create_table("t", {"id": "int64", "v": "<f4"}, "id")
    count = BLOCK_ROWS + 5
    for i in range(count):
        x = tn.begin()
        x.insert("t", {"id": [i], "v": np.array([i / 2], dtype="<f4")})
        x.commit()
    x = tn.begin()
    x.insert("t", {"id": [7], "v": np.array([0], dtype="<f4")})
    with pytest.raises(DuplicateKeyError):
        x.commit()
    rowids = {pk: tn.tables["t"].pk_index.get(pk) for pk in range(count)}
    tn.close()
    log.close()
    log = LogService.open(tmp_path / "log", truncation_interval=0)
    tn = TransactionNode(log, ObjectStore(tmp_path / "objects"))
    try:
        assert {pk: tn.tables["t"].pk_index.get(pk) for pk in range(count)} == rowids
        rows = {}
        for e in tn.pull("t", 0)["entries"]:
            if e.kind == "insert":
                rows.update(zip(e.batch.column("id").to_pylist(), e.batch.column("v").to_pylist()))
        assert rows == {i: i / 2 for i in range(count)}
    finally:
        tn.close()
        log.close()


def _cn_view(tn):
    """What a CN sees and what the TN keeps: the pulled and pushed logtail, the in-memory rows, the published
    (ts, lsn) pairs, whether last_ts covers them, and the key indexes; each ts as its rank among the
    records' (the push thread's heartbeats take timestamps and move last_ts too, so the numbers
    themselves vary from run to run)."""
    rank = {ts: i for i, (ts, _) in enumerate(sorted(tn._lsn_ts))}

    def rows(es):
        return [(e.kind, rank[e.ts], [{**r, "__ts": rank[r["__ts"]]} for r in e.batch.to_pylist()]) for e in es]
    st = tn.tables["t"]
    pushed = [(rank[ts], tb, rows(es)) for ts, tb, es in tn.logtail.visit(0, tn.last_ts)]   # what a push sends
    return (rows(tn.pull("t", 0)["entries"]), pushed, rows(st.mem_inserts), rows(st.mem_deletes),
            [(rank[ts], lsn) for ts, lsn in tn._lsn_ts], tn.last_ts >= max(rank), list(st.pk_index.items()),
            [(pk, rank[ts]) for pk, ts in st.pk_ts.items()])


# how a transaction's "v" values arrive: an array of the column's dtype, a list the C form converts
# itself, a list that needs coerce (held in the small form all the same)
FORMS = {"f4 array": ("<f4", lambda keys: np.array(keys, dtype="<f4") / 2),
         "f8 list": ("<f8", lambda keys: [k / 2 for k in keys]),
         "i4 list": ("<i4", lambda keys: [k * 3 for k in keys])}


@scaled(max_examples=25, deadline=None)
@given(form=st.sampled_from(sorted(FORMS)),
       txns=st.lists(st.tuples(st.lists(st.integers(0, 12), min_size=1, max_size=3, unique=True),
                               st.booleans(), st.sampled_from(["one insert", "two inserts", "rollback"])),
                     min_size=1, max_size=12))
def test_small_insert_publishes_what_the_python_path_publishes(form, txns):
    """The same transactions on a TN whose small inserts take the C path (TxnCore) and queue their
    logtail handle, and on one whose commits all take the Python path (c_commits=False): the same
    outcomes, the same logtail and in-memory rows, the same published (ts, lsn) and the same state
    once reopened. A second insert call turns a transaction into its general form."""
    import tempfile
    dtype, values = FORMS[form]
    views, outcomes = [], []
    with tempfile.TemporaryDirectory() as d:
        for fast in (True, False):
            path = f"{d}/{fast}"
            log = LogService.open(f"{path}/log", truncation_interval=0)
            tn = TransactionNode(log, ObjectStore(f"{path}/objects"), c_commits=fast)
            got = []
            try:
                tn.create_table("t", {"id": "int64", "v": dtype}, "id")
                early = tn.begin()
                for keys, stale, shape in txns:
                    # a stale writer began before every commit so far: write conflicts show
                    x = early if stale and not early.done else tn.begin()
                    x.insert("t", {"id": keys, "v": values(keys)})
                    if shape == "two inserts":
                        more = [k + 100 for k in keys]
                        x.insert("t", {"id": more, "v": values(more)})
                    if shape == "rollback":
                        x.rollback()
                        got.append("rolled back")
                    else:
                        got.append(_outcome(x.commit))
                view = _cn_view(tn)
            finally:
                tn.close()
                log.close()
            log = LogService.open(f"{path}/log", truncation_interval=0)
            tn = TransactionNode(log, ObjectStore(f"{path}/objects"))
            try:
                views.append((view, _cn_view(tn)[0], _cn_view(tn)[6:]))
            finally:
                tn.close()
                log.close()
            outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    assert views[0] == views[1]
