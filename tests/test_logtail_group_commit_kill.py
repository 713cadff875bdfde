"""SIGKILL a TN process under 16 concurrent committers (group commit): every acknowledged commit
survives, and no commit is half visible (each transaction writes two rows to one table and one to
another, so a torn group or an out-of-order log would show up as a partial transaction)."""
import textwrap

import pytest

from acked_child import run_and_kill
from logtide.engine.logtail import ComputeNode, TransactionNode

THREADS = 16
CHILD = textwrap.dedent("""
    import sys, threading, time
    from logtide.engine.logtail import TransactionNode
    tn = TransactionNode.open(sys.argv[1])
    for name in ("t", "u"):
        if name not in tn.tables:
            tn.create_table(name, {"id": "int64", "v": "int64"}, "id")
    start = int(sys.argv[2])
    out = threading.Lock()

    def committer(k):
        i = start
        while True:
            x = tn.begin()
            base = (k * 1_000_000 + i) * 2
            x.insert("t", {"id": [base, base + 1], "v": [i, i]})
            x.insert("u", {"id": [k * 1_000_000 + i], "v": [i]})
            if i % 5 == 4 and i - 2 >= start:
                old = (k * 1_000_000 + i - 2) * 2
                x.delete("t", [old, old + 1])
            ts = x.commit()
            with out:
                sys.stdout.write(f"{k} {i} {ts}\\n")   # only after the commit is acknowledged
                sys.stdout.flush()
            i += 1

    def maintenance():
        n = 0
        while True:
            time.sleep(0.02)
            tn.flush()
            n += 1
            if n % 2 == 0:
                tn.checkpoint_now()
                with out:
                    sys.stdout.write("mark\\n")   # a checkpoint under load: the kill waits for one
                    sys.stdout.flush()

    for k in range({threads}):
        threading.Thread(target=committer, args=(k,), daemon=True).start()
    threading.Thread(target=maintenance, daemon=True).start()
    threading.Event().wait()
""").replace("{threads}", str(THREADS))


@pytest.mark.timeout(240)
def test_sigkill_under_sixteen_committers(tmp_path):
    first = run_and_kill(CHILD, tmp_path, 0, 1500, marks=1)
    second = run_and_kill(CHILD, tmp_path, 100_000, 800)     # ids of the second life never meet the first's
    tn = TransactionNode.open(tmp_path)
    cn = None
    try:
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        cn.subscribe("u")
        t_rows = {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
        u_rows = {r["id"]: r["v"] for r in cn.read("u", tn.last_ts).to_pylist()}
        acked = {(k, i) for k, i, _ in first + second}
        # every acknowledged transaction's u row is there; its t rows are, unless a later
        # transaction of the same thread deleted them
        present = {(uid // 1_000_000, uid % 1_000_000) for uid in u_rows}
        assert acked <= present, sorted(acked - present)[:10]
        for k, i in present:
            assert u_rows[k * 1_000_000 + i] == i
            base = (k * 1_000_000 + i) * 2
            deleted = (i + 2) % 5 == 4 and (k, i + 2) in present
            if deleted:
                assert base not in t_rows and base + 1 not in t_rows, (k, i)
            else:   # both rows or none would be a torn transaction
                assert t_rows.get(base) == i and t_rows.get(base + 1) == i, (k, i)
        # unacknowledged but durable: only each thread's commit in flight at the kill
        for life, start in ((first, 0), (second, 100_000)):
            for k in range(16):
                mine = [i for kk, i, _ in life if kk == k]
                top = max(mine, default=start - 1)
                extra = {i for kk, i in present - acked if kk == k and start <= i < start + 100_000}
                assert extra <= {top + 1}, (k, extra, top)
        # a thread's commits are durable as a prefix: no gaps below its newest durable one
        for k in range(16):
            for start in (0, 100_000):
                mine = sorted(i for kk, i in present if kk == k and start <= i < start + 100_000)
                assert mine == list(range(start, start + len(mine))), (k, mine[:5])
        # the recovered logtail is in ts order, and the acknowledged ts are what the log holds
        handles = [ts for ts, _, _ in tn.logtail.visit(0, tn.last_ts)]
        assert handles == sorted(handles)
        assert tn.checkpoint is not None
    finally:
        if cn is not None:
            cn.close()
        tn.close()
        tn.log.close()
