"""Truncation: the log and the LogIndex shrink once every RO node's min used LSN passes a point, and
a lagging RO node holds truncation back, so the WAL it still needs is never cut off."""
import time

import pytest

from logtide.engine.logservice import LogService
from logtide.replay.primary import Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess
from logtide.replay.verify import stamped

REL = 16384


def _until(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.timeout(120)
def test_log_and_logindex_shrink_and_a_lagging_node_holds_them(tmp_path):
    log = LogService.open(tmp_path / "log", segment_size=16 << 10, truncation_interval=0.05)
    # 2-segment memtables fill after a few records, so LogIndex table files fill up quickly too
    seg = 2
    primary = Primary(tmp_path, log=log, pool_pages=64, checkpoint_interval=0.05, logindex_segments=seg)
    fast = ReadOnlyNode(tmp_path, log, node_id=1, feedback_interval=0.05, logindex_segments=seg)
    slow = ReadOnlyNode(tmp_path, log, node_id=2, feedback_interval=0.05, background=False, logindex_segments=seg)
    links = [connect_inprocess(primary, fast), connect_inprocess(primary, slow)]
    try:
        tids = [primary.insert(REL, bytes([i % 251]) * 200) for i in range(300)]
        # the slow node's background replayer is driven by hand: first it keeps up...
        assert slow.wait_applied(primary.write_lsn)
        assert _until(lambda: slow.background_step() == 0 and primary.truncated_lsn > 0)
        # ...then it caches a page and stops: its min used LSN stays where its replayer stopped
        held_tag = rel_tag(REL, 0)
        slow.read_page(held_tag)
        held = slow.bg_lsn + 1  # its min used LSN cannot pass this while the replayer stands still
        assert slow.min_used_lsn() <= held
        for i in range(600):
            tids[i % 300] = primary.update(REL, tids[i % 300], bytes([i % 13]) * 180)
        assert _until(lambda: fast.min_used_lsn() > held + 500)
        time.sleep(0.3)  # a few more checkpoints and feedback rounds
        # truncation is held at the slow node's min used LSN, not the fast one's
        assert slow.min_used_lsn() == held
        assert primary.truncated_lsn < held
        assert log.get_first_lsn() <= held
        # the slow node can still bring its old cached page up to date
        page, lsn = slow.read_page(held_tag)
        want, wlsn = primary.read_page(held_tag)
        assert lsn == wlsn == primary.write_lsn and stamped(page, 0) == stamped(want, 0)
        # once it replays in the background again, the log and the LogIndex shrink
        segments_before = log.stats()["segments"]
        tables_before = primary.index.stats()["meta"].min_table_id
        files_before = primary.index.stats()["truncated_files"]
        assert _until(lambda: slow.background_step() == 0 and slow.min_used_lsn() > held + 500)
        assert _until(lambda: primary.truncated_lsn > held + 400, timeout=30)
        assert _until(lambda: log.stats()["segments"] < segments_before, timeout=30)
        assert _until(lambda: primary.index.stats()["truncated_files"] > files_before, timeout=30)
        assert primary.index.stats()["meta"].min_table_id > tables_before  # LogIndex table files removed
        # nothing anyone needs is gone: both nodes read every page at the latest LSN
        for b in range(primary.nblocks(REL)):
            want, wlsn = primary.read_page(rel_tag(REL, b))
            for ro in (fast, slow):
                assert ro.wait_applied(wlsn)
                page, lsn = ro.read_page(rel_tag(REL, b))
                assert lsn == wlsn and stamped(page, b) == stamped(want, b)
    finally:
        for l in links:
            l.close()
        fast.close()
        slow.close()
        primary.close()
        log.close()
