"""Promotion in one process: the primary stops without flushing anything, an RO node becomes the
primary, and every acknowledged write is there; the other RO node follows the new primary."""
import random
import time

import pytest

from logtide.engine.logservice import LogService
from logtide.replay.primary import Primary
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess

REL = 16384


@pytest.mark.timeout(120)
def test_promote_loses_no_acknowledged_write(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, pool_pages=16, checkpoint_interval=0.05)
    ro1 = ReadOnlyNode(tmp_path, log, node_id=1, feedback_interval=0.05)
    links = [connect_inprocess(primary, ro1)]
    rng = random.Random(5)
    acked = {}
    try:
        for i in range(400):
            if rng.random() < 0.05:
                datas = [rng.randbytes(rng.randint(5, 300)) for _ in range(6)]
                for t, data in zip(primary.insert_many(REL, datas), datas):
                    acked[t] = data
            elif acked and rng.random() < 0.3:
                tid = rng.choice(sorted(acked))
                data = rng.randbytes(rng.randint(5, 300))
                acked[primary.update(REL, tid, data)] = data
                del acked[tid]
            else:
                data = rng.randbytes(rng.randint(5, 300))
                acked[primary.insert(REL, data)] = data
        # let a checkpoint put pages in the store, then write more: the crash loses those pages' buffers
        assert ro1.wait_applied(primary.write_lsn)
        deadline = time.monotonic() + 30
        while primary.store.pages_written == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert primary.store.pages_written > 0
        for i in range(30):
            data = rng.randbytes(50)
            acked[primary.insert(REL, data)] = data
        primary.crash()   # dirty pages are lost; the log has every acknowledged write
        links[0].close()
        new = ro1.promote(log_service=log, pool_pages=64, checkpoint_interval=0.05)
        assert new.recovered_records > 0
        for tid, data in acked.items():
            assert new.get(REL, tid) == data
        # the new primary takes writes, and another RO node follows it
        tid = new.insert(REL, b"after promotion")
        ro2 = ReadOnlyNode(tmp_path, log, node_id=2, feedback_interval=0.05)
        links.append(connect_inprocess(new, ro2))
        assert ro2.wait_applied(new.write_lsn)
        assert ro2.get(REL, tid) == b"after promotion"
        for t, data in list(acked.items())[:50]:
            assert ro2.get(REL, t) == data
        assert dict(ro2.scan(REL)) == dict(new.scan(REL))  # a whole-relation scan on the RO node
        ro2.close()
        new.close()
    finally:
        for l in links:
            l.close()
        ro1.close()
        log.close()
