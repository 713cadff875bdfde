"""Push and pull: heartbeats move idle watermarks, unsubscribed tables are never sent, updates are
contiguous and in commit order, oversize pulls flush first, checkpoints report the replayed LSN."""
import time

import numpy as np
import pytest

from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.logtail.tn import READER_NAME
from logtide.engine.logtail.transport import encode_request

COLS = {"id": "int64", "v": "int64"}


@pytest.fixture
def tn(tmp_path):
    tn = TransactionNode.open(tmp_path, heartbeat_ms=2.0)
    tn.create_table("a", COLS, "id")
    tn.create_table("b", COLS, "id")
    yield tn
    tn.close()
    tn.log.close()


def commit(tn, table, ids):
    x = tn.begin()
    x.insert(table, {"id": ids, "v": ids})
    return x.commit()


def test_heartbeats_move_idle_watermarks(tn):
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    cn.subscribe("a")
    cn.subscribe("b")
    ts = commit(tn, "a", [1, 2])
    cn.wait_for("b", ts, timeout=5)       # "b" saw no change, yet its watermark passes ts
    w0 = cn.watermark("b")
    deadline = time.time() + 10
    while cn.watermark("b") <= w0 and time.time() < deadline:
        time.sleep(0.01)
    assert cn.watermark("b") > w0         # idle, and still moving: a heartbeat every 2 ms
    assert cn.read("b", ts).num_rows == 0 and cn.read("a", ts).num_rows == 2
    cn.unsubscribe("a")
    deadline = time.time() + 5
    while "a" in cn.states and time.time() < deadline:
        time.sleep(0.01)
    assert "a" not in cn.states
    cn.close()


def test_unsubscribed_tables_are_never_sent_and_updates_are_contiguous(tn):
    s = tn.connect("raw")
    s.send_to_tn(encode_request("subscribe", "a"))
    first, deadline = None, time.time() + 20
    while (first is None or first[0] != "subscribed") and time.time() < deadline:
        first = s.cn_recv(timeout=0.1)   # heartbeats may come first: "a" is not in them yet
    assert first is not None and first[0] == "subscribed"
    for i in range(20):
        commit(tn, "a" if i % 2 else "b", [i])
    last = tn.last_ts
    msgs, deadline = [], time.time() + 20
    while time.time() < deadline:
        m = s.cn_recv(timeout=0.1)
        if m is None:
            continue
        msgs.append(m)
        if m[2] >= last:
            break
    prev = first[1]["to_ts"]
    seen = []
    for m in msgs:
        if m[2] <= first[1]["to_ts"]:
            continue
        assert m[0] == "update" and m[1] == prev and m[2] > m[1]      # (from, to] follow each other
        prev = m[2]
        assert set(m[3]) <= {"a"}                                     # "b" never comes
        for es in m[3].values():     # one batch per table and kind per message; each row has its ts
            seen += [ts for e in es for ts in e.batch.column("__ts").to_pylist()]
    assert seen == sorted(seen) and len(seen) == 10                   # commit order, each once
    s.cut()


def test_oversize_pull_flushes_first(tmp_path):
    tn = TransactionNode.open(tmp_path, max_pull_rows=1000)
    try:
        tn.create_table("a", COLS, "id")
        for k in range(5):
            commit(tn, "a", np.arange(k * 400, (k + 1) * 400))
        assert not tn.store.list("a-")
        small = tn.pull("a", 0, tn.last_ts)            # a closed range is answered as it is
        assert sum(e.rows for e in small["entries"]) == 2000
        resp = tn.pull("a", 0)                         # open range over the limit: flush, then metadata
        assert tn.store.list("a-") and sum(e.rows for e in resp["entries"]) == 0
        assert [e.kind for e in resp["entries"]] == ["meta"]
    finally:
        tn.close()
        tn.log.close()


def test_checkpoint_truncates_logtail_and_reports_the_replayed_lsn(tn):
    for k in range(30):
        commit(tn, "a", [k])
    # the checkpoint keeps what the push loop has not sent yet; with no stream open its heartbeat
    # moves pushed_ts within a few ms (commits can outrun it)
    end = time.monotonic() + 10
    while tn.pushed_ts < tn.last_ts:
        assert time.monotonic() < end, "the push loop's heartbeat never caught up"
        time.sleep(0.002)
    before = len(tn.logtail)
    ckp = tn.checkpoint_now()
    assert len(tn.logtail) < before and tn.logtail.first_ts() > ckp.ts
    assert tn.log.readers()[READER_NAME] == ckp.lsn and tn.log.get_truncated_lsn() == ckp.lsn
    resp = tn.pull("a", 0, tn.last_ts)
    assert resp["checkpoint"] == ckp.name and resp["from_ts"] == ckp.ts


def test_a_tn_dropped_unclosed_is_collected_and_its_directory_reopens(tmp_path):
    """Its push thread holds it only while pushing: dropping the last reference closes it (queued
    commits durable, push thread ended, its log closed), so the directory reopens in this process."""
    import weakref
    from lifetime import collected, run_threads, thread_names
    from logtide.errors import DuplicateKeyError
    tn = TransactionNode.open(tmp_path, heartbeat_ms=2.0)
    tn.create_table("a", COLS, "id")
    run_threads(8, lambda k: [commit(tn, "a", [k * 10 + i]) for i in range(10)])
    ref = weakref.ref(tn)
    del tn
    assert collected(ref), "the dropped TN stayed alive"
    assert thread_names("logtail-push") == []
    tn = TransactionNode.open(tmp_path, heartbeat_ms=2.0)
    try:
        for k in range(80):      # every acknowledged row is there: inserting it again conflicts
            with pytest.raises(DuplicateKeyError):
                commit(tn, "a", [k])
    finally:
        tn.close()
        tn.log.close()
