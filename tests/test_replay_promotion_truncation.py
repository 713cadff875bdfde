"""Truncation across promotion (issue 10, bug 2): a promoted primary starts from the truncation hold
the cluster recorded (the log service's registered RO readers), so an RO node that lagged behind the
old primary can re-attach and read exactly the new primary's pages; and a subscribe whose start is
below the truncation point is refused with a typed error, never accepted."""
import random
import time

import numpy as np
import pytest

from logtide.engine.logservice import LogService
from logtide.errors import TruncatedSubscribeError
from logtide.replay import Primary, ReadOnlyNode, connect_inprocess
from logtide.replay.batch_replay import block_refs
from logtide.replay.primary import rel_tag

REL = 16384


def _unstamped(page: bytes) -> bytes:
    """The page without pd_checksum (bytes 8..9): buffer pools do not keep it current."""
    return page[:8] + page[10:]


def _page_lsns(wal, lo: int, hi: int) -> dict[tuple, list[int]]:
    """Every page's LSNs in [lo, hi] as the log's records say (read in full, block references decoded)."""
    out: dict[tuple, list[int]] = {}
    lsn = lo
    while lsn <= hi:
        recs = wal.read(lsn, 4 << 20)
        if not recs:
            break
        offs = np.zeros(len(recs) + 1, dtype=np.int64)
        np.cumsum([len(r) for _, r in recs], out=offs[1:])
        tags, rec = block_refs(np.frombuffer(b"".join(r for _, r in recs), dtype=np.uint8), offs)
        lsns = np.array([l for l, _ in recs], dtype=np.uint64)[rec]
        for t, l in zip(map(tuple, tags.tolist()), lsns.tolist()):
            if l <= hi and (not out.get(t) or out[t][-1] != l):
                out.setdefault(t, []).append(l)
        lsn = recs[-1][0] + 1
    return out


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
            # the lagging node's LogIndex (its memtables across the promotion, the tables of both
            # primaries) gives each page exactly the LSNs the log has for it, in order
            first = max(new.wal.first_lsn(), log.get_truncated_lsn() + 1)   # the index may drop below it
            truth = _page_lsns(new.wal, first, new.write_lsn)
            for b in range(new.nblocks(REL)):
                tag = rel_tag(REL, b)
                assert slow.index.lsns(tag, first, new.write_lsn).tolist() == truth.get(tag, []), f"block {b}"
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
