"""Bad input: unknown tables, malformed stream frames, wrong column types, corrupt records. Each gets a
clear typed error, and nothing else is disturbed."""
import numpy as np
import pytest

from logtide.engine.logtail import ComputeNode, ReferenceModel, TransactionNode
from logtide.engine.logtail import logtail_format as fmt
from logtide.errors import (DuplicateKeyError, KeyNotFoundError, LogtideError, MalformedMessageError, SchemaError,
                            UnknownTableError)

COLS = {"id": "int64", "v": "int32", "w": "float64"}


@pytest.fixture
def node(tmp_path):
    tn = TransactionNode.open(tmp_path)
    tn.create_table("t", COLS, "id")
    x = tn.begin()
    x.insert("t", {"id": [1, 2, 3], "v": [10, 20, 30], "w": [0.5, 1.5, 2.5]})
    x.commit()
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store, "cn")
    cn.subscribe("t")
    yield tn, cn
    cn.close()
    tn.close()
    tn.log.close()


def wait_errors(cn, n):
    """Each malformed frame is answered with one typed error message, and the stream stays up."""
    import time
    deadline = time.time() + 20
    while [k for k, _ in cn.errors].count("MalformedMessageError") < n and time.time() < deadline:
        time.sleep(0.01)
    assert [k for k, _ in cn.errors].count("MalformedMessageError") == n, cn.errors


def rows(cn, ts=None):
    return ReferenceModel.rows_of(cn.read("t", ts), "id")


def test_subscribe_to_an_unknown_table(node):
    tn, cn = node
    before = rows(cn)
    with pytest.raises(UnknownTableError):
        cn.subscribe("nope")
    x = tn.begin()
    x.insert("t", {"id": [4], "v": [40], "w": [4.0]})
    ts = x.commit()
    assert rows(cn, ts) == {**before, 4: {"id": 4, "v": 40, "w": 4.0}}   # the stream still works


def test_malformed_stream_frames(node):
    tn, cn = node
    for frame in (b"\xff\x00garbage", b'{"op": "drop", "table": "t"}', b"[1, 2]", "not bytes", b'{"op":"subscribe"}'):
        cn.stream.send_to_tn(frame)
    x = tn.begin()
    x.delete("t", [1])
    ts = x.commit()
    cn.wait_for("t", ts)
    assert set(rows(cn, ts)) == {2, 3}
    wait_errors(cn, 5)
    assert cn.reconnects == 0
    with pytest.raises(MalformedMessageError):
        from logtide.engine.logtail.transport import decode_request
        decode_request(b"{")


def test_commit_of_wrong_column_types_changes_nothing(node):
    tn, cn = node
    before = rows(cn)
    bad = [
        {"id": [9], "v": [1.5], "w": [1.0]},             # float into an int32 column
        {"id": ["x"], "v": [1], "w": [1.0]},             # str primary key
        {"id": [9], "v": [1 << 40], "w": [1.0]},         # does not fit int32
        {"id": [9], "v": [1]},                           # a column missing
        {"id": [9], "v": [1], "w": [1.0], "z": [0]},     # a column too many
        {"id": [9, 10], "v": [1], "w": [1.0, 2.0]},      # ragged
        [1, 2, 3],
    ]
    for rows_ in bad:
        x = tn.begin()
        with pytest.raises(SchemaError):
            x.insert("t", rows_)
    x = tn.begin()
    with pytest.raises(UnknownTableError):
        x.insert("nope", {"id": [1]})
    with pytest.raises(SchemaError):
        x.delete("t", ["a"])
    assert issubclass(SchemaError, LogtideError) and issubclass(SchemaError, TypeError)
    x = tn.begin()
    x.insert("t", {"id": [1], "v": [1], "w": [1.0]})
    with pytest.raises(DuplicateKeyError):
        x.commit()
    x = tn.begin()
    x.delete("t", [99])
    with pytest.raises(KeyNotFoundError):
        x.commit()
    x = tn.begin()
    x.insert("t", {"id": np.array([7], dtype=np.int32), "v": np.array([7], dtype=np.int8), "w": [7]})
    ts = x.commit()                                     # safe casts are fine
    assert rows(cn, ts) == {**before, 7: {"id": 7, "v": 7, "w": 7.0}}


def test_corrupt_records_and_bad_schemas():
    with pytest.raises(MalformedMessageError):
        fmt.decode(b"short")
    with pytest.raises(MalformedMessageError):
        fmt.decode(fmt.HEADER.pack(b"XXXX", fmt.COMMIT, 1, 0))
    good = fmt.encode(fmt.Record(fmt.COMMIT, 5, {}, [("t", fmt.INSERT, __import__("pyarrow").table({"a": [1]}))]))
    assert fmt.decode(good).batches[0][2].column("a").to_pylist() == [1]
    with pytest.raises(MalformedMessageError):
        fmt.decode(good[:-10])
    from logtide.engine.logtail.catalog import TableDef
    for cols, pk in (({"id": "int32"}, "id"), ({"id": "int64", "s": "U8"}, "id"), ({"id": "int64"}, "x"),
                     ({"__id": "int64"}, "__id")):
        with pytest.raises(SchemaError):
            TableDef.make("t", cols, pk)


def test_malformed_frames_over_grpc_and_pull(tmp_path):
    from logtide.engine.logtail.service import pull, serve
    from logtide.engine.logtail.transport import RemoteStream
    tn = TransactionNode.open(tmp_path)
    server, addr = serve(tn)
    try:
        tn.create_table("t", COLS, "id")
        cn = ComputeNode(lambda: RemoteStream(addr, "g"), tn.store, "g")
        cn.subscribe("t")
        for frame in (b"\xff\x00garbage", b'{"op": "drop", "table": "t"}', b"[1, 2]"):
            cn.stream.send_to_tn(frame)
        with pytest.raises(MalformedMessageError):
            cn.stream.send_to_tn("not bytes")
        with pytest.raises(UnknownTableError):
            cn.subscribe("nope")
        x = tn.begin()
        x.insert("t", {"id": [1], "v": [1], "w": [1.0]})
        ts = x.commit()
        assert rows(cn, ts) == {1: {"id": 1, "v": 1, "w": 1.0}}
        wait_errors(cn, 3)
        assert cn.reconnects == 0
        resp = pull(addr, "t", 0, ts)
        assert resp["to_ts"] == ts and sum(e.rows for e in resp["entries"]) == 1
        with pytest.raises(UnknownTableError):
            pull(addr, "nope")
        cn.close()
    finally:
        server.stop(0.5)
        tn.close()
        tn.log.close()


def _rows_of_pull(tn):
    out = {}
    for e in tn.pull("t", 0)["entries"]:
        if e.kind == "insert":
            out.update(zip(e.batch.column("id").to_pylist(), e.batch.column("v").to_pylist()))
        elif e.kind == "delete":
            for pk in e.batch.column("__pk").to_pylist():
                out.pop(pk)
    return out


def test_a_refused_insert_leaves_no_key_behind(tmp_path):
    """Issue 23: an insert refused for a duplicate key kept the keys before the duplicate in the
    transaction, so a later insert of such a key was refused and an update of it made a row."""
    tn = TransactionNode.open(tmp_path)
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        x = tn.begin()
        x.insert("t", {"id": [1], "v": [10]})
        with pytest.raises(DuplicateKeyError):
            x.insert("t", {"id": [0, 1], "v": [20, 21]})     # key 1: refused, whole
        x.insert("t", {"id": [0], "v": [30]})                # key 0 was never inserted
        x.commit()
        assert _rows_of_pull(tn) == {1: 10, 0: 30}
        y = tn.begin()
        with pytest.raises(DuplicateKeyError):
            y.insert("t", {"id": [5, 6, 5], "v": [1, 2, 3]})
        y.update("t", {"id": [5], "v": [50]})     # 5 is not in the table: a delete of a missing row
        with pytest.raises(KeyNotFoundError):
            y.commit()
        assert _rows_of_pull(tn) == {1: 10, 0: 30}
    finally:
        tn.close()
        tn.log.close()


def test_refused_txn_calls_change_nothing(tmp_path):
    """Every Txn call that raises leaves the transaction as it was: the commit holds exactly the
    calls that returned."""
    tn = TransactionNode.open(tmp_path)
    try:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
        x = tn.begin()
        x.insert("t", {"id": [1, 2], "v": [10, 20]})
        x.commit()
        x = tn.begin()
        x.insert("t", {"id": [3], "v": [30]})
        refused = [
            (DuplicateKeyError, lambda: x.insert("t", {"id": [4, 3], "v": [40, 41]})),
            (DuplicateKeyError, lambda: x.insert("t", {"id": [7, 7], "v": [1, 2]})),
            (SchemaError, lambda: x.insert("t", {"id": [8], "v": ["x"]})),
            (SchemaError, lambda: x.insert("t", {"id": [8, 9], "v": [1]})),
            (SchemaError, lambda: x.update("t", {"id": [1], "w": [1]})),
            (SchemaError, lambda: x.delete("t", [1.5])),
            (SchemaError, lambda: x.delete("t", np.array([2, 1 << 63], dtype=np.uint64))),
            (UnknownTableError, lambda: x.insert("nope", {"id": [1]})),
            (UnknownTableError, lambda: x.delete("nope", [1])),
        ]
        for err, call in refused:
            with pytest.raises(err):
                call()
        assert set(x.ins) == {"t"} and set(x.ins["t"]) == {3} and not x.dels.get("t")
        x.insert("t", {"id": [4], "v": [40]})     # none of the refused keys stuck
        x.delete("t", [2])
        x.commit()
        assert _rows_of_pull(tn) == {1: 10, 3: 30, 4: 40}
    finally:
        tn.close()
        tn.log.close()


def _wait_reconnects(cn, n):
    import time
    deadline = time.time() + 20
    while cn.reconnects < n and time.time() < deadline:
        time.sleep(0.01)
    assert cn.reconnects >= n


def test_a_refused_subscribe_survives_a_stream_cut(node):
    """A subscribe refused for a name that is not a str added it to the wanted tables all the same;
    the next reconnect then failed on it and the CN's receiver died: every later read timed out."""
    tn, cn = node
    before = rows(cn)
    for name in (b"t", 5, None, ("t",), ["t"]):
        with pytest.raises(UnknownTableError):
            cn.subscribe(name, timeout=5)
        with pytest.raises(UnknownTableError):
            cn.unsubscribe(name)
    assert cn.wanted == {"t"} and rows(cn) == before        # nothing changed
    cn.stream.cut()                                          # any loss of the stream
    _wait_reconnects(cn, 1)
    x = tn.begin()
    x.insert("t", {"id": [4], "v": [40], "w": [4.0]})
    ts = x.commit()
    assert rows(cn, ts) == {**before, 4: {"id": 4, "v": 40, "w": 4.0}}
    assert cn.get("t", 4, ts) == {"id": 4, "v": 40, "w": 4.0}


def test_a_message_of_an_unexpected_shape_does_not_kill_the_cn(node):
    """A TN message the CN cannot handle (a field missing, a wrong type) raised KeyError or
    TypeError in its receiver thread, which died: every later read timed out. The CN now logs
    it, starts a new stream and catches up."""
    tn, cn = node
    before = rows(cn)
    errors = len(cn.errors)
    for bogus in (("subscribed", {"bogus": 1}), ("update", None), ("update", 5, 6), ("subscribed", None)):
        n = cn.reconnects
        cn.stream.send_to_cn(bogus)              # as a TN with a bug would send it
        _wait_reconnects(cn, n + 1)
    assert len(cn.errors) >= errors + 4
    x = tn.begin()
    x.insert("t", {"id": [5], "v": [50], "w": [5.0]})
    ts = x.commit()
    assert rows(cn, ts) == {**before, 5: {"id": 5, "v": 50, "w": 5.0}}


def test_snapshot_ts_is_an_int_not_below_zero(node):
    from logtide.errors import InvalidArgument
    tn, cn = node
    ts0 = cn.watermark("t")
    before = rows(cn, ts0)
    not_ints = (float("nan"), float(ts0), "1", True, np.True_, np.float64(ts0), [ts0], b"1")
    negative = (-1, np.int64(-1), -(1 << 70))
    calls = (lambda ts: cn.read("t", ts, timeout=5), lambda ts: cn.get("t", 1, ts, timeout=5),
             lambda ts: cn.wait_for("t", ts, timeout=5), lambda ts: tn.pull("t", ts),
             lambda ts: tn.pull("t", 0, ts))
    for call in calls:
        for ts in not_ints:
            with pytest.raises(TypeError):
                call(ts)
        for ts in negative:
            with pytest.raises(InvalidArgument):
                call(ts)
    assert issubclass(InvalidArgument, ValueError) and issubclass(InvalidArgument, LogtideError)
    with pytest.raises(TypeError):
        cn.wait_for("t", None)
    assert cn.watermark("t") >= ts0 and rows(cn, ts0) == before and cn.wanted == {"t"}
    for ts in (np.int64(ts0), np.uint64(ts0), np.int32(ts0)):     # numpy integers are ints
        assert rows(cn, ts) == before
        assert cn.get("t", 1, ts) == {"id": 1, "v": 10, "w": 0.5}
    assert sum(e.rows for e in tn.pull("t", np.int64(0), np.uint64(ts0))["entries"]) == 3
    x = tn.begin()                                   # and both keep working
    x.delete("t", [2])
    ts = x.commit()
    assert set(rows(cn, ts)) == {1, 3} and rows(cn, ts0) == before
    assert cn.get("t", 2, ts) is None


def test_values_a_column_cannot_hold_exactly_are_refused(node):
    """coerce changed values instead of refusing them: 1e300 became inf in a float32 column,
    2**60 + 1 became 2**60 in a float64 one, True became 1 in an int8 one and pk 1 as the key."""
    from logtide.engine.logtail.catalog import TableDef
    tn, cn = node
    cols = {"id": "int64", "i8": "int8", "f32": "float32", "f64": "float64", "b": "bool"}
    tn.create_table("n", cols, "id")
    cn.subscribe("n")
    tdef = tn.table_def("n")
    good = {"id": 1, "i8": 1, "f32": 0.5, "f64": 0.5, "b": True}
    bad = [
        ("f32", 1e300), ("f32", -1e39), ("f32", (1 << 24) + 1), ("f64", (1 << 60) + 1),
        ("f64", (1 << 63) - 1), ("f64", np.uint64((1 << 64) - 1)), ("i8", True), ("i8", np.True_),
        ("i8", 128), ("i8", 1.0), ("id", True), ("id", np.uint64(1 << 63)), ("b", 1), ("b", 1.0),
    ]
    for c, v in bad:
        for given in ([v], np.array([v]), v):                # a list, an array and a scalar alike
            with pytest.raises(SchemaError):
                tdef.coerce({**{k: [x] for k, x in good.items()}, c: given})
            x = tn.begin()
            with pytest.raises(SchemaError):
                x.insert("n", {**{k: [x] for k, x in good.items()}, c: given})
            x.rollback()
    # lists that numpy would merge into one dtype, changing a value on the way
    for c, vs in (("i8", [True, 2]), ("id", [2, True]), ("f64", [0.5, (1 << 60) + 1]), ("b", [True, 1]),
                  ("f32", [0.5, (1 << 24) + 1])):
        row = {k: [x, x] for k, x in good.items()}
        row["id"] = [1, 2]
        with pytest.raises(SchemaError):
            tdef.coerce({**row, c: vs})
    assert rows(cn, tn.last_ts) == {1: {"id": 1, "v": 10, "w": 0.5}, 2: {"id": 2, "v": 20, "w": 1.5},
                                    3: {"id": 3, "v": 30, "w": 2.5}}
    assert cn.read("n", tn.last_ts).num_rows == 0          # nothing went in
    # what fits: floats round to float32, ints a float column holds exactly, inf and nan
    x = tn.begin()
    x.insert("n", {"id": [1, 2, 3], "i8": np.array([-128, 127, 0], dtype=np.int64),
                   "f32": [0.1, float("inf"), 1 << 24], "f64": [(1 << 53), 0.5, float("nan")],
                   "b": [True, False, np.True_]})
    ts = x.commit()
    got = cn.read("n", ts).to_pydict()
    assert got["id"] == [1, 2, 3] and got["i8"] == [-128, 127, 0] and got["b"] == [True, False, True]
    assert got["f32"] == [float(np.float32(0.1)), float("inf"), float(1 << 24)]
    assert got["f64"][:2] == [float(1 << 53), 0.5] and np.isnan(got["f64"][2])


def test_insert_commits_the_rows_it_checked(node):
    """Txn.insert kept the caller's arrays: changing one after insert and before commit wrote other
    rows than the ones checked (ids [5, 5]: the duplicate-key check bypassed, a row lost)."""
    from logtide.engine.logtail.commit_check import SMALL_TXN_KEYS
    tn, cn = node
    before = rows(cn)

    def arrays(ids):
        ids = np.array(ids, dtype=np.int64)
        return ids, {"id": ids, "v": (ids * 10).astype(np.int32), "w": ids * 0.5}

    def want(ids):
        return {int(i): {"id": int(i), "v": int(i) * 10, "w": int(i) * 0.5} for i in ids}

    # one small insert (held in C), a second insert (the general form), many rows, an update
    ids, cols = arrays([5, 6])
    x = tn.begin()
    x.insert("t", cols)
    ids[1] = 5
    cols["v"][:] = 0
    ts = x.commit()
    assert rows(cn, ts) == {**before, **want([5, 6])}
    ids2, cols2 = arrays([7, 8])
    many = list(range(100, 101 + SMALL_TXN_KEYS))
    ids3, cols3 = arrays(many)
    ids4, cols4 = arrays([5])
    cols4["v"] = np.array([55], dtype=np.int32)
    x = tn.begin()
    x.insert("t", cols2)
    x.insert("t", cols3)
    x.update("t", cols4)
    for a in (ids2, ids3, ids4):
        a[:] = 7
    cols4["v"][:] = 0
    ts2 = x.commit()
    assert rows(cn, ts2) == {**before, **want([6, 7, 8]), **want(many), 5: {"id": 5, "v": 55, "w": 2.5}}
    ids[:] = 9                                          # and after the commit: the TN's rows are its own
    assert rows(cn, ts) == {**before, **want([5, 6])}
    assert _rows_of_pull(tn) == {k: r["v"] for k, r in rows(cn, ts2).items()}


def test_cn_timeouts_and_keys_are_checked_before_anything_changes(node, tmp_path):
    """A NaN, negative, infinite or non-number timeout is an InvalidArgument, given before a
    subscribe adds its table; a primary key that is not an int is a TypeError, never a
    row of another key."""
    from logtide.errors import InvalidArgument
    tn, cn = node
    tn.create_table("u", COLS, "id")
    ts0 = cn.watermark("t")
    before = rows(cn, ts0)
    bad = (float("nan"), -1.0, 0, float("inf"), "5", True, None)
    for timeout in bad:
        with pytest.raises(InvalidArgument):
            cn.subscribe("u", timeout=timeout)
        with pytest.raises(InvalidArgument):
            cn.wait_for("t", ts0, timeout=timeout)
        with pytest.raises(InvalidArgument):
            cn.read("t", ts0, timeout=timeout)
        with pytest.raises(InvalidArgument):
            cn.get("t", 1, ts0, timeout=timeout)
    assert cn.wanted == {"t"}                     # no refused subscribe left its table behind
    for pk in (1.0, 1.5, "1", b"1", None, (1,), True, np.float64(1), np.bool_(True)):
        with pytest.raises(TypeError):
            cn.get("t", pk, ts0)
    for pk in (1 << 63, -(1 << 63) - 1):
        with pytest.raises(InvalidArgument):
            cn.get("t", pk, ts0)
    for kw in ({"reconnect_delay": float("nan")}, {"reconnect_delay": -1}, {"connect_timeout": float("nan")},
               {"connect_timeout": 0}):
        with pytest.raises(InvalidArgument):
            ComputeNode(lambda: tn.connect("cn2"), tn.store, "cn2", **kw)
    assert rows(cn, ts0) == before and cn.get("t", 1, ts0) == {"id": 1, "v": 10, "w": 0.5}
    cn.subscribe("u", timeout=5)                   # and both keep working
    assert cn.wanted == {"t", "u"}


def test_bad_tn_options_are_refused_before_anything_starts(tmp_path):
    from logtide.errors import InvalidArgument
    for bad in ({"heartbeat_ms": 0}, {"heartbeat_ms": -1.0}, {"heartbeat_ms": float("nan")},
                {"heartbeat_ms": float("inf")}, {"heartbeat_ms": "2"}, {"heartbeat_ms": True},
                {"page_size": 0}, {"page_size": 2.5}, {"max_pull_rows": 0}, {"max_pull_rows": None}):
        with pytest.raises(InvalidArgument):
            TransactionNode.open(tmp_path, **bad)
    tn = TransactionNode.open(tmp_path, heartbeat_ms=0.5)     # the refusals left the log unlocked
    tn.create_table("t", {"id": "int64"}, "id")
    tn.close()
