"""Snapshot equivalence: random transactions with flushes and checkpoints, 2 CNs, reads at many ts
compared with a reference model (a dict of committed versions); reads with and without the block index
agree, and point gets agree with the model too."""
import random

import numpy as np
import pytest

from logtide.engine.logtail import ComputeNode, ReferenceModel, TransactionNode
from logtide.errors import WriteConflictError

COLS = {"id": "int64", "qty": "int32", "price": "float64", "flag": "bool"}


def random_workload(tn, ref, rng: random.Random, txns: int, keys: int, flush_every: int, ckp_every: int):
    """Commit random transactions on table "t"; returns every commit ts."""
    live = set(ref.at(1 << 62))
    stamps = []
    for i in range(txns):
        x = tn.begin()
        ups, dels, touched = [], [], set()
        for _ in range(rng.randint(1, 12)):
            pk = rng.randrange(keys)
            if pk in touched:
                continue
            touched.add(pk)
            row = {"id": pk, "qty": rng.randrange(-1000, 1000), "price": rng.random() * 100,
                   "flag": rng.random() < 0.5}
            if pk in live:
                if rng.random() < 0.4:
                    dels.append(pk)
                else:
                    ups.append(row)
            else:
                ups.append(row)
        new = [r for r in ups if r["id"] not in live]
        upd = [r for r in ups if r["id"] in live]
        if new:
            x.insert("t", {c: [r[c] for r in new] for c in COLS})
        if upd:
            x.update("t", {c: [r[c] for r in upd] for c in COLS})
        if dels:
            x.delete("t", dels)
        ts = x.commit()
        ref.commit(ts, ups, dels)
        live |= {r["id"] for r in ups}
        live -= set(dels)
        stamps.append(ts)
        if flush_every and i % flush_every == flush_every - 1:
            tn.flush()
        if ckp_every and i % ckp_every == ckp_every - 1:
            tn.checkpoint_now()
    return stamps


def check_equal(cn, ref, stamps, rng):
    for ts in sorted(rng.sample(stamps, min(25, len(stamps)))) + [stamps[-1]]:
        exp = ref.at(ts)
        got = ReferenceModel.rows_of(cn.read("t", ts), "id")
        assert got == exp, f"{cn.name} at ts {ts}: {len(got)} rows vs {len(exp)} expected"
        assert ReferenceModel.rows_of(cn.read("t", ts, use_block_index=False), "id") == exp
        for pk in rng.sample(range(300), 10):
            assert cn.get("t", pk, ts) == exp.get(pk), (cn.name, ts, pk)


def connector(tn, transport, server_box):
    """connect(name) -> a function opening a new stream to the TN over the transport."""
    if transport == "inproc":
        return lambda name: (lambda: tn.connect(name))
    from logtide.engine.logtail.service import serve
    from logtide.engine.logtail.transport import RemoteStream
    server, addr = serve(tn)
    server_box.append(server)
    return lambda name: (lambda: RemoteStream(addr, name))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed,transport", [(1, "inproc"), (2, "inproc"), (3, "grpc"), (4, "grpc")])
def test_two_cns_match_the_reference_model_at_many_ts(tmp_path, seed, transport):
    rng = random.Random(seed)
    tn = TransactionNode.open(tmp_path, heartbeat_ms=2.0, page_size=16)
    servers = []
    try:
        tn.create_table("t", COLS, "id")
        ref = ReferenceModel(list(COLS), "id")
        conn = connector(tn, transport, servers)
        cn1 = ComputeNode(conn("cn1"), tn.store, "cn1")
        cn1.subscribe("t")                                   # subscribed from the start
        stamps = random_workload(tn, ref, rng, 150, 300, flush_every=37, ckp_every=70)
        cn2 = ComputeNode(conn("cn2"), tn.store, "cn2")
        cn2.subscribe("t")                                   # joins late: checkpoint + logtail
        stamps += random_workload(tn, ref, rng, 150, 300, flush_every=29, ckp_every=0)
        for cn in (cn1, cn2):
            check_equal(cn, ref, stamps, rng)
        assert tn.checkpoint is not None and len(tn.store.list("t-")) > 2
        cn1.close()
        cn2.close()
    finally:
        for srv in servers:
            srv.stop(0.5)
        tn.close()
        tn.log.close()


def test_write_write_conflict_on_a_primary_key(tmp_path):
    tn = TransactionNode.open(tmp_path)
    try:
        tn.create_table("t", COLS, "id")
        x = tn.begin()
        x.insert("t", {"id": [1, 2], "qty": [1, 2], "price": [1.0, 2.0], "flag": [True, False]})
        x.commit()
        a, b = tn.begin(), tn.begin()
        a.update("t", {"id": [1], "qty": [10], "price": [1.0], "flag": [True]})
        b.delete("t", [1])
        a.commit()
        with pytest.raises(WriteConflictError):
            b.commit()
        c = tn.begin()                       # began after a committed: no conflict
        c.delete("t", [1])
        c.commit()
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        assert cn.read("t").column("id").to_pylist() == [2]
        cn.close()
    finally:
        tn.close()
        tn.log.close()


def test_cn_row_store_compacts_after_flushes(tmp_path):
    tn = TransactionNode.open(tmp_path)
    try:
        tn.create_table("t", COLS, "id")
        ref = ReferenceModel(list(COLS), "id")
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe("t")
        stamps = []
        for k in range(10):
            ids = np.arange(k * 1000, (k + 1) * 1000)
            x = tn.begin()
            x.insert("t", {"id": ids, "qty": ids.astype(np.int32), "price": ids * 0.5, "flag": ids % 2 == 0})
            ts = x.commit()
            ref.commit(ts, [{"id": int(i), "qty": int(i), "price": i * 0.5, "flag": bool(i % 2 == 0)} for i in ids], [])
            stamps.append(ts)
        held = cn.read("t", stamps[4])                   # a reader's result from before the compaction
        x = tn.begin()
        x.delete("t", [1, 2, 3])
        tail = x.commit()
        ref.commit(tail, [], [1, 2, 3])
        tn.flush()
        x = tn.begin()
        x.delete("t", [4])
        last = x.commit()
        ref.commit(last, [], [4])
        cn.wait_for("t", last)
        ps = cn.states["t"]
        assert ps.n == 1 and len(ps.rows) == 1        # only the delete after the flush is in memory
        for ts in stamps + [tail, last]:
            assert ReferenceModel.rows_of(cn.read("t", ts), "id") == ref.at(ts)
        assert held.num_rows == 5000
        cn.close()
    finally:
        tn.close()
