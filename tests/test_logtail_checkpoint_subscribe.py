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
