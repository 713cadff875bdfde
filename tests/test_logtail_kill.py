"""Restart: a TN process killed with SIGKILL mid-load and reopened from its log and objects has every
transaction it acknowledged (and a CN subscribed to the new TN reads them all)."""
import textwrap

import pytest

from acked_child import run_and_kill
from logtide.engine.logtail import ComputeNode, TransactionNode

CHILD = textwrap.dedent("""
    import sys
    from logtide.engine.logtail import TransactionNode
    tn = TransactionNode.open(sys.argv[1])
    if "t" not in tn.tables:
        tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    i = int(sys.argv[2])
    while True:
        x = tn.begin()
        x.insert("t", {"id": [i], "v": [i * 7]})
        if i % 5 == 4:
            x.delete("t", [i - 2])
        ts = x.commit()
        print(i, ts, flush=True)           # printed only after the commit is acknowledged
        if i % 40 == 39:
            tn.flush()
        if i % 150 == 149:
            tn.checkpoint_now()
        i += 1
""")


def expected(acked_ids):
    live = {}
    for i in acked_ids:
        live[i] = i * 7
        if i % 5 == 4:
            live.pop(i - 2, None)
    return live


@pytest.mark.timeout(180)
def test_sigkilled_tn_loses_no_acknowledged_commit(tmp_path):
    first = run_and_kill(CHILD, tmp_path, 0, 400)
    # a second life, killed too; it skips one id: the first life may have committed it unacknowledged
    second = run_and_kill(CHILD, tmp_path, first[-1][0] + 2, 200)
    acked = first + second
    tn = TransactionNode.open(tmp_path)
    try:
        st = tn.tables["t"]
        exp = expected([i for i, _ in acked])
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        got = {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
        # a commit may be durable without its ack printed; such rows may be there too, nothing else
        extra = set(got) - set(exp)
        missing = {k for k in exp if got.get(k) != exp[k]}
        assert not missing, sorted(missing)[:10]
        assert extra <= {first[-1][0] + 1, second[-1][0] + 1}, extra
        vals, found = st.pk_index.get_many(list(exp))
        assert found.all()
        assert tn.checkpoint is not None
        assert tn.log.get_truncated_lsn() > 0
        cn.close()
    finally:
        tn.close()
        tn.log.close()
