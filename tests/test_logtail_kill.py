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
    for i in sorted(acked_ids):
        live[i] = i * 7
        if i % 5 == 4:
            live.pop(i - 2, None)
    return live


def outcomes(acked_ids, unacked):
    """Every state the log may hold: each life's next commit may be durable without its ack printed,
    and such a commit both inserts its id and (every fifth id) deletes an acknowledged one."""
    out = []
    for k in range(1 << len(unacked)):
        chosen = [u for j, u in enumerate(unacked) if k >> j & 1]
        out.append(expected(list(acked_ids) + chosen))
    return out


@pytest.mark.timeout(180)
def test_sigkilled_tn_loses_no_acknowledged_commit(tmp_path):
    first = run_and_kill(CHILD, tmp_path, 0, 400)
    # a second life, killed too; it skips one id: the first life may have committed it unacknowledged
    second = run_and_kill(CHILD, tmp_path, first[-1][0] + 2, 200)
    acked = [i for i, _ in first + second]
    tn = TransactionNode.open(tmp_path)
    cn = None
    try:
        st = tn.tables["t"]
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        got = {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
        states = outcomes(acked, [first[-1][0] + 1, second[-1][0] + 1])
        # the state must be one of them exactly: every acknowledged commit there, nothing else
        assert got in states, (sorted(set(states[0]) ^ set(got))[:10], first[-1], second[-1])
        _, found = st.pk_index.get_many(list(got))
        assert found.all()
        assert tn.checkpoint is not None
        assert tn.log.get_truncated_lsn() > 0
    finally:
        if cn is not None:
            cn.close()
        tn.close()
        tn.log.close()
