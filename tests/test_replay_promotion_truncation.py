"""Truncation across promotion (issue 10, bug 2): a promoted primary starts from the truncation hold
the cluster recorded (the log service's registered RO readers), so an RO node that lagged behind the
old primary can re-attach and read exactly the new primary's pages; and a subscribe whose start is
below the truncation point is refused with a typed error, never accepted."""
import random
import time

import pytest

from logtide.engine.logservice import LogService
from logtide.errors import TruncatedSubscribeError
from logtide.replay import Primary, ReadOnlyNode, connect_inprocess
from logtide.replay.primary import rel_tag

REL = 16384


def _unstamped(page: bytes) -> bytes:
    """The page without pd_checksum (bytes 8..9): buffer pools do not keep it current."""
    return page[:8] + page[10:]


@pytest.mark.timeout(180)
def test_lagging_ro_node_reads_the_promoted_primarys_pages(tmp_path):
    log = LogService.open(tmp_path / "log")
    p = Primary(tmp_path, log=log, checkpoint_interval=0.05, logindex_segments=2)
    fast = ReadOnlyNode(tmp_path, log, node_id=1, feedback_interval=0.05, logindex_segments=2)
    slow = ReadOnlyNode(tmp_path, log, node_id=2, feedback_interval=0.05, logindex_segments=2, background=False)
    links = [connect_inprocess(p, fast), connect_inprocess(p, slow)]
    rng = random.Random(10)
    try:
        tids = p.insert_many(REL, [rng.randbytes(40) for _ in range(150)])
        assert slow.wait_applied(p.write_lsn)
        for b in range(p.nblocks(REL)):              # the slow node has every page cached
            slow.read_page(rel_tag(REL, b))
        for i in range(2500):
            j = rng.randrange(len(tids))
            tids[j] = p.update(REL, tids[j], rng.randbytes(40))
        assert fast.wait_applied(p.write_lsn) and slow.wait_applied(p.write_lsn)
        time.sleep(0.3)                                 # a few checkpoints (and truncations) run
        p.crash()
        for l in links:
            l.close()
        new = fast.promote(log_service=log, checkpoint_interval=0.05, logindex_segments=2)
        links = []
        try:
            for i in range(50):
                j = rng.randrange(len(tids))
                tids[j] = new.update(REL, tids[j], rng.randbytes(40))
            new.checkpoint()
            links.append(connect_inprocess(new, slow))
            assert slow.wait_applied(new.write_lsn)
            for b in range(new.nblocks(REL)):
                tag = rel_tag(REL, b)
                assert _unstamped(slow.read_page(tag)[0]) == _unstamped(new.read_page(tag)[0]), f"block {b} differs"
            assert dict(slow.scan(REL)) == dict(new.scan(REL))
        finally:
            for l in links:
                l.close()
            new.close()
    finally:
        fast.close()
        slow.close()
        log.close()


def test_subscribe_below_the_truncation_point_is_refused(tmp_path):
    log = LogService.open(tmp_path / "log")
    p = Primary(tmp_path, log=log, checkpoint_interval=0, logindex_segments=2)
    try:
        for i in range(3000):
            p.insert(REL, bytes(100))
        p.checkpoint()
        p.checkpoint()
        assert p.truncated_lsn > 10
        with pytest.raises(TruncatedSubscribeError):
            p.subscribe(5, index_from=p.truncated_lsn)
        assert 5 not in p.replicas
        start, ready = p.subscribe(5, index_from=p.truncated_lsn + 1)   # from the first kept LSN: fine
        assert start == p.truncated_lsn + 1
    finally:
        p.close()
        log.close()
