"""Reconnect: a CN's stream is cut again and again while the TN commits; afterwards the CN's state
equals the TN's (the reference model) at every ts checked: no row missed, none twice."""
import random
import threading
import time

import pytest

from logtide.engine.logtail import ComputeNode, ReferenceModel, TransactionNode

COLS = {"id": "int64", "v": "int64"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["inproc", "grpc"])
def test_cut_streams_mid_push_end_in_the_same_state(tmp_path, transport):
    tn = TransactionNode.open(tmp_path, page_size=32)
    tn.create_table("t", COLS, "id")
    ref = ReferenceModel(list(COLS), "id")
    if transport == "inproc":
        def conn(name):
            return lambda: tn.connect(name)
    else:
        from logtide.engine.logtail.service import serve
        from logtide.engine.logtail.transport import RemoteStream
        server, addr = serve(tn)

        def conn(name):
            return lambda: RemoteStream(addr, name)
    names = ("cn-cn", "cn-steady", "logtail-remote-cn", "logtail-remote-steady")
    before = {t for t in threading.enumerate() if t.name in names}    # a failed test's leftovers
    cn = ComputeNode(conn("cn"), tn.store, "cn")
    cn.subscribe("t")
    other = ComputeNode(conn("steady"), tn.store, "steady")
    other.subscribe("t")
    stamps, stop = [], threading.Event()

    def load():
        rng = random.Random(5)
        live = set()
        i = 0
        while not stop.is_set():
            x = tn.begin()
            new = [k for k in rng.sample(range(2000), 20) if k not in live][:10]
            gone = rng.sample(sorted(live), min(5, len(live)))
            gone = [k for k in gone if k not in new]
            if new:
                x.insert("t", {"id": new, "v": [i] * len(new)})
            if gone:
                x.delete("t", gone)
            ts = x.commit()
            ref.commit(ts, [{"id": k, "v": i} for k in new], gone)
            live |= set(new)
            live -= set(gone)
            stamps.append(ts)
            i += 1
            if i % 150 == 0:
                tn.flush()

    th = threading.Thread(target=load)
    th.start()
    try:
        for k in range(8):                 # cut the stream while pushes are in flight
            time.sleep(0.15)
            cn.stream.cut()
            deadline = time.time() + 20    # the next cut goes to the next stream
            while cn.reconnects <= k and time.time() < deadline:
                time.sleep(0.01)
        time.sleep(0.2)
    finally:
        stop.set()
        th.join()
    last = stamps[-1]
    assert cn.reconnects >= 8
    exp = ref.at(last)
    assert ReferenceModel.rows_of(cn.read("t", last), "id") == exp
    assert ReferenceModel.rows_of(other.read("t", last), "id") == exp
    rng = random.Random(9)
    for ts in rng.sample(stamps, 15):
        assert ReferenceModel.rows_of(cn.read("t", ts), "id") == ref.at(ts)
    cn.close()
    other.close()
    # close() saw every thread of both CNs end, the cut streams' too: none is left to be inside
    # pyarrow when an interpreter that exits next finalizes
    left = [t.name for t in threading.enumerate() if t.name in names and t not in before]
    assert left == []
    if transport == "grpc":
        server.stop(0.5)
    tn.close()
    tn.log.close()
