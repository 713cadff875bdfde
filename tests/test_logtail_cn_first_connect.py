"""A CN started before its TN listens (cluster up under load, a TN restart) waits for it, up to its
connect deadline, instead of failing at once; with no TN at all it ends in a typed error."""
import threading
import time

import pytest
from ports import free_ports

from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.logtail.service import serve
from logtide.engine.logtail.transport import RemoteStream
from logtide.errors import StreamClosedError


def _free_address() -> str:
    port, = free_ports(1)
    return f"127.0.0.1:{port}"


@pytest.mark.timeout(60)
def test_cn_waits_for_a_tn_that_starts_later(tmp_path):
    tn = TransactionNode.open(tmp_path, page_size=32)
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    x = tn.begin()
    x.insert("t", {"id": [1, 2, 3], "v": [7, 8, 9]})
    ts = x.commit()
    addr = _free_address()
    made = {}

    def start_cn():
        made["cn"] = ComputeNode(lambda: RemoteStream(addr, "late"), tn.store, "late", connect_timeout=20)

    th = threading.Thread(target=start_cn)
    th.start()
    time.sleep(1.0)                       # the CN is retrying against a closed port
    assert th.is_alive()
    server, _ = serve(tn, addr)
    try:
        th.join(20)
        cn = made["cn"]
        cn.subscribe("t")
        cn.wait_for("t", ts)
        assert sorted(cn.read("t", ts).column("id").to_pylist()) == [1, 2, 3]
        cn.close()
    finally:
        server.stop()
        tn.close()


@pytest.mark.timeout(30)
def test_cn_with_no_tn_ends_in_a_typed_error(tmp_path):
    addr = _free_address()
    from logtide.engine.objectstore import ObjectStore
    t0 = time.monotonic()
    with pytest.raises(StreamClosedError, match="no stream to the TN"):
        ComputeNode(lambda: RemoteStream(addr, "none"), ObjectStore(str(tmp_path / "o")), "none", connect_timeout=1.5)
    assert 1.0 <= time.monotonic() - t0 < 10
