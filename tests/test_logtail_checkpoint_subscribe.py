"""One rule for subscribe, pull and checkpoint (issue 10, bug 3): any response that starts below the
newest checkpoint carries that checkpoint. A CN subscribing while checkpoint_now() runs lost the rows
of earlier flushes for good; pull(t, 0, to_ts) below the checkpoint returned nothing."""
import threading

import pytest

from logtide.engine.logtail import ComputeNode, TransactionNode


@pytest.mark.timeout(120)
def test_subscribe_during_checkpoint_misses_no_rows(tmp_path):
    tn = TransactionNode.open(tmp_path)
    tn.create_table("t", {"id": "int64"}, "id")
    try:
        for r in range(25):
            x = tn.begin()
            x.insert("t", {"id": [r]})
            ts = x.commit()
            tn.flush()
            tn.begin()        # takes a ts from the TSO after the last push
            cns = [ComputeNode(lambda: tn.connect(), tn.store) for _ in range(6)]
            th = [threading.Thread(target=tn.checkpoint_now)] + \
                 [threading.Thread(target=c.subscribe, args=("t",)) for c in cns]
            [t.start() for t in th]
            [t.join() for t in th]
            got = [c.read("t", ts).num_rows for c in cns]
            [c.close() for c in cns]
            assert min(got) == r + 1 == max(got), (r, got)
    finally:
        tn.close()


def test_pull_below_the_checkpoint_carries_it(tmp_path):
    tn = TransactionNode.open(tmp_path)
    tn.create_table("t", {"id": "int64"}, "id")
    try:
        stamps = []
        for r in range(5):
            x = tn.begin()
            x.insert("t", {"id": [r]})
            stamps.append(x.commit())
        ckp = tn.checkpoint_now()
        assert ckp.ts > stamps[2]
        resp = tn.pull("t", 0, stamps[2])
        assert resp["checkpoint"] == ckp.name
        assert resp["from_ts"] == ckp.ts and resp["to_ts"] >= ckp.ts
        # and above it: the same checkpoint, then the logtail after it
        x = tn.begin()
        x.insert("t", {"id": [99]})
        ts = x.commit()
        resp = tn.pull("t", 0, ts)
        assert resp["checkpoint"] == ckp.name and resp["to_ts"] == ts
        assert sum(e.rows for e in resp["entries"] if e.kind == "insert") == 1
        # a range entirely above the checkpoint carries none
        assert tn.pull("t", ckp.ts, ts)["checkpoint"] is None
    finally:
        tn.close()


def test_checkpoint_never_cuts_logtail_the_push_has_not_sent(tmp_path):
    """Found by the fault matrix: a flush, then at once a checkpoint (the CLI's loop does both in one
    round) truncated the first flush's metadata from the logtail before the push loop sent it. The
    subscribed CN never learned those objects, and the next flush's cleanup ts dropped the rows from
    its memory: rows lost for good. Holding the TN's commit lock (re-entrant) keeps the push loop
    out, so the interleaving is certain here."""
    tn = TransactionNode.open(tmp_path)
    tn.create_table("t", {"id": "int64"}, "id")
    cn = ComputeNode(lambda: tn.connect(), tn.store)
    try:
        cn.subscribe("t")
        x = tn.begin()
        x.insert("t", {"id": [0]})
        cn.read("t", x.commit())                    # row 0 is pushed and in the CN's memory
        with tn._cv:                                # the push loop waits for this lock
            x = tn.begin()
            x.insert("t", {"id": [1]})
            x.commit()
            tn.flush()                              # flush A: rows 0 and 1 go to an object
            x = tn.begin()
            x.insert("t", {"id": [2]})
            x.commit()
            tn.checkpoint_now()                     # flush B, then the logtail is truncated
            x = tn.begin()
            x.insert("t", {"id": [3]})
            ts = x.commit()
        got = cn.read("t", ts, timeout=10)
        assert sorted(got.column("id").to_pylist()) == [0, 1, 2, 3]
        fresh = ComputeNode(lambda: tn.connect(), tn.store)
        fresh.subscribe("t")
        assert sorted(fresh.read("t", ts, timeout=10).column("id").to_pylist()) == [0, 1, 2, 3]
        fresh.close()
    finally:
        cn.close()
        tn.close()
