"""Consistency: under a randomized multi-threaded primary workload, every page two RO nodes return at
their applied LSN N is byte-identical to the primary's page at N, as rebuilt by a model that
replays the WAL from scratch. Over the in-process transport and over gRPC; lazy and eager nodes."""
import random
import threading
import time

import pytest

from logtide.engine.logservice import LogService, connect_logservice
from logtide.replay.primary import Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess
from logtide.replay.verify import ScratchModel
from logtide.replay.wal_log import WalLog

RELS = (16384, 16385)


def _workload(primary, stop, seed, acked):
    rng = random.Random(seed)
    mine = []
    while not stop.is_set():
        rel = rng.choice(RELS)
        r = rng.random()
        if r < 0.08:
            tids = primary.insert_many(rel, [rng.randbytes(rng.randint(10, 300)) for _ in range(rng.randint(1, 8))])
            mine.extend((rel, t) for t in tids)
        elif r < 0.55 or not mine:
            tid = primary.insert(rel, rng.randbytes(rng.randint(10, 400)))
            mine.append((rel, tid))
        elif r < 0.85:
            i = rng.randrange(len(mine))
            rel, tid = mine[i]
            mine[i] = (rel, primary.update(rel, tid, rng.randbytes(rng.randint(10, 900))))
        else:
            rel, tid = mine.pop(rng.randrange(len(mine)))
            primary.delete(rel, tid)
    acked.extend(mine)


def _readers(ros, primary, stop, samples, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        ro = rng.choice(ros)
        rel = rng.choice(RELS)
        n = primary.nblocks(rel)
        if not n:
            time.sleep(0.001)
            continue
        tag = rel_tag(rel, rng.randrange(n))
        page, lsn = ro.read_page(tag)
        samples.append((ro.node_id, tag, lsn, page))


def _run(tmp_path, link):
    log = LogService.open(tmp_path / "log")
    log.register_reader("verifier", 0)  # the model replays from LSN 1: keep the whole log
    primary = Primary(tmp_path, log=log, pool_pages=24, checkpoint_interval=0.05)
    ros, links = [], []
    try:
        for node_id, mode in ((1, "lazy"), (2, "lazy"), (3, "eager")):
            ro = ReadOnlyNode(tmp_path, link.log_for(log), node_id=node_id, mode=mode,
                              pool_pages=12 if mode == "lazy" else 4096, feedback_interval=0.05)
            links.append(link.connect(primary, ro))
            ros.append(ro)
        stop = threading.Event()
        acked, samples = [], []
        ws = [threading.Thread(target=_workload, args=(primary, stop, s, acked)) for s in range(3)]
        rs = [threading.Thread(target=_readers, args=(ros, primary, stop, samples, 100 + s)) for s in range(3)]
        for t in ws + rs:
            t.start()
        time.sleep(2.5)
        stop.set()
        for t in ws + rs:
            t.join(timeout=60)
        final = primary.write_lsn
        for ro in ros:
            assert ro.wait_applied(final, timeout=60)
        # the final state, every page, on every node
        for ro in ros:
            for rel in RELS:
                for b in range(primary.nblocks(rel)):
                    page, lsn = ro.read_page(rel_tag(rel, b))
                    samples.append((ro.node_id, rel_tag(rel, b), lsn, page))
        model = ScratchModel(WalLog(log), final)
        assert len(samples) > 200
        bad = [(n, t, l) for n, t, l, p in samples if not model.same(t, l, p)]
        assert not bad, f"{len(bad)} of {len(samples)} pages differ, first {bad[:3]}"
        # and the primary's own pages at the end
        for rel in RELS:
            for b in range(primary.nblocks(rel)):
                page, lsn = primary.read_page(rel_tag(rel, b))
                assert model.same(rel_tag(rel, b), lsn, page)
        lazy = ros[0].stats()
        assert lazy["cold"] and lazy["replayed"] and lazy["marked_outdated"]  # lazy replay really ran
        assert primary.store.pages_written > 0  # pages went through shared storage
        return primary, ros
    finally:
        for l in links:
            l.close()
        for ro in ros:
            ro.close()
        primary.close()
        link.shutdown()
        log.close()


class InProc:
    def log_for(self, log):
        return log

    def connect(self, primary, ro):
        return connect_inprocess(primary, ro)

    def shutdown(self):
        pass


class Grpc:
    """A real gRPC server on 127.0.0.1:0 in this process; RO nodes reach the primary and the log through it."""

    def __init__(self):
        self.server = None
        self.clients = []

    def _serve(self, log, primary=None):
        from logtide.engine.logservice.rpc_service import LOGSERVICE, LogServiceServicer
        from logtide.engine.rpc.dual_server import DualServer
        from logtide.replay.replication_rpc import REPLICATION, ReplicationServicer
        if self.server is None:
            self.server = DualServer("127.0.0.1:0")
            self.server.add_service(LOGSERVICE, LogServiceServicer(log, self.server.max_message_size))
            self.server.start()
        if primary is not None and not hasattr(self, "_repl"):
            self._repl = True
            self.server.add_service(REPLICATION, ReplicationServicer(primary))

    def log_for(self, log):
        self._serve(log)
        c = connect_logservice(self.server.address)   # the framed carrier, as the RO node's CLI
        self.clients.append(c)
        return c

    def connect(self, primary, ro):
        from logtide.replay.replication_rpc import connect_replication
        self._serve(None, primary)
        return connect_replication(ro, self.server.address)

    def shutdown(self):
        for c in self.clients:
            c.close()
        if self.server is not None:
            self.server.stop(0.5)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["inproc", "grpc"])
def test_ro_pages_equal_primary_at_applied_lsn(tmp_path, transport):
    _run(tmp_path, InProc() if transport == "inproc" else Grpc())
