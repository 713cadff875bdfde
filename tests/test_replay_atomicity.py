"""Multi-page atomicity: the seed's two-backend scenario.

Record N+1 moves a tuple between two pages (an update with two block references). The startup
worker has added N+1 to the first page's LSN list but not yet to the second's. Backend 0 reads
one page and backend 1 the other. Without mini-transactions one page could be replayed to N+1
while the other stays at N. With them, both backends wait until the record is indexed for both
pages, and then both see N+1.
"""
import threading
import time

import pytest

from logtide._ext import page as pg
from logtide.engine.logservice import LogService
from logtide.replay.primary import Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess

REL = 16384


@pytest.mark.timeout(60)
def test_seed_two_backend_scenario(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    paused, resume = threading.Event(), threading.Event()
    watch = {"lsn": None}

    def hook(i, tag, lsn):
        # pause inside the mini-transaction of the two-page record, after its first page (page 0)
        if lsn == watch["lsn"] and i == 0:
            paused.set()
            assert resume.wait(30)

    ro = ReadOnlyNode(tmp_path, log, node_id=1, index_hook=hook, background=False, feedback_interval=0.05)
    link = connect_inprocess(primary, ro)
    try:
        # block 0: a small tuple and two big ones; block 1: a big one (it no longer fits block 0)
        big = b"x" * 3000
        tid = primary.insert(REL, b"small" * 20)
        primary.insert(REL, big)
        primary.insert(REL, big)
        assert primary.insert(REL, big)[0] == 1
        assert ro.wait_applied(primary.write_lsn)
        for b in (0, 1):  # cache both pages on the RO node
            ro.read_page(rel_tag(REL, b))
        n = primary.write_lsn
        watch["lsn"] = n + 1
        # record N+1: the tuple grows and moves from block 0 to block 1 (block refs: 0 = block 1, 1 = block 0)
        new_tid = primary.update(REL, tid, b"moved " * 400)
        assert new_tid[0] == 1 and primary.write_lsn == n + 1
        assert paused.wait(10)  # the startup worker indexed N+1 for block 1, not yet for block 0
        results = {}

        def backend(k):
            page, lsn = ro.read_page(rel_tag(REL, k))
            results[k] = (pg.get_lsn(page), lsn, time.monotonic())

        b0 = threading.Thread(target=backend, args=(0,))
        b1 = threading.Thread(target=backend, args=(1,))
        b0.start()
        b1.start()
        time.sleep(0.3)
        assert results == {}  # both backends wait for the mini-transaction
        released = time.monotonic()
        resume.set()
        b0.join(10)
        b1.join(10)
        assert results[0][0] == n + 1 and results[1][0] == n + 1   # both pages after N+1
        assert results[0][1] == results[1][1] == n + 1
        assert results[0][2] >= released and results[1][2] >= released
        assert ro.locks.waits >= 2
        # the tuple is on page 0 and gone from page 1, as on the primary
        assert ro.get(REL, new_tid) == b"moved " * 400 and ro.get(REL, tid) is None
    finally:
        resume.set()
        link.close()
        ro.close()
        primary.close()
        log.close()
