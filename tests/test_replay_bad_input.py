"""Bad input on the replication path: a WAL record with a bad CRC stops the RO node with a clear
error instead of being applied; truncated or altered stream messages are rejected and the node
goes on; malformed RPC frames get typed errors and the server stays up."""
import pytest

from logtide._ext import xlogwriter as xw
from logtide.engine.logservice import LogService
from logtide.errors import CorruptionError, CorruptWALRecordError, LogtideError, ReplicaError
from logtide.replay.meta_stream import StreamFormatError, encode_batch
from logtide.replay.primary import Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess

REL = 16384


@pytest.mark.timeout(60)
def test_bad_crc_record_stops_the_node(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, background=False)
    link = connect_inprocess(primary, ro)
    try:
        tid = primary.insert(REL, b"good")
        assert ro.wait_applied(primary.write_lsn)
        tag = rel_tag(REL, tid[0])
        before, lsn0 = ro.read_page(tag)
        link.close()  # from here on the test is the primary: it writes one damaged record
        good = xw.heap_insert(tag, 2, b"evil", prev=primary.write_lsn)
        bad = bytearray(good)
        bad[-6] ^= 0xFF  # a byte of the tuple: only the CRC can tell
        lsn = log.append(bytes(bad))
        ro.receive(encode_batch([lsn], [xw.wal_meta(good)], lsn, 0))  # its meta is intact
        assert ro.wait_applied(lsn)
        with pytest.raises(CorruptWALRecordError, match="CRC"):
            ro.read_page(tag)
        assert isinstance(ro.error, CorruptWALRecordError)
        with pytest.raises(ReplicaError):  # it stays stopped: no later read applies anything
            ro.read_page(tag)
        f = ro.pool.lookup(tag)
        assert f < 0 or ro.pool.frames[f].tobytes() == before  # nothing of the bad record was applied
    finally:
        ro.close()
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_bad_crc_record_stops_primary_recovery(tmp_path):
    """A record whose log frame is intact but whose own CRC is not (a writer's damage, not the
    disk's) stops the primary's crash recovery with a typed error. The record touches two pages,
    and its first block is the later page, so the redo (in page order) meets it at its second."""
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    primary.insert(REL, b"before")
    later, earlier = rel_tag(REL + 1, 3), rel_tag(REL, 7)
    bad = bytearray(xw.full_page_images([later, earlier], [bytes(8192), bytes(8192)], prev=primary.write_lsn))
    bad[-100] ^= 0xFF  # a byte of the second image: only the CRC can tell
    lsn = log.append(bytes(bad))
    primary.crash()
    log.close()
    log = LogService.open(tmp_path / "log")
    try:
        with pytest.raises(CorruptWALRecordError, match=rf"CRC.*\(LSN {lsn}\)"):
            Primary(tmp_path, log=log, checkpoint_interval=0)
    finally:
        log.close()


@pytest.mark.timeout(60)
def test_bad_crc_record_stops_the_primary_opening_its_own_log(tmp_path):
    """A primary that opens its own log checks every record's own CRC-32C there, with its frame's
    (check_records): the damaged record stops it with CorruptLogError naming the LSN, before any
    redo; the intact log around it is left as it was."""
    from logtide import CorruptLogError
    primary = Primary(tmp_path, checkpoint_interval=0)
    primary.insert(REL, b"before")
    assert primary.log_service.records_checked_through == 0    # a new log: nothing to check
    bad = bytearray(xw.full_page_images([rel_tag(REL + 1, 3)], [bytes(8192)], prev=primary.write_lsn))
    bad[-100] ^= 0xFF
    lsn = primary.log_service.append(bytes(bad))
    primary.crash()
    primary.log_service.close()                   # as the dead process's would be
    with pytest.raises(CorruptLogError, match=rf"LSN {lsn} .*incorrect resource manager data checksum"):
        Primary(tmp_path, checkpoint_interval=0)
    log = LogService.open(tmp_path / "log")      # unchecked, the record is data like any other
    try:
        assert log.get_latest_lsn() == lsn
    finally:
        log.close()


@pytest.mark.timeout(60)
def test_records_appended_after_a_checked_open_are_checked_by_the_redo(tmp_path):
    """A log opened with check_records vouches only for the records it held at its open: a damaged
    record appended later (the same log object, a primary restarted over it) is caught by the
    redo's own check, at its first applied reference."""
    log = LogService.open(tmp_path / "log", check_records=True)
    try:
        primary = Primary(tmp_path, log=log, checkpoint_interval=0)
        primary.insert(REL, b"before")
        bad = bytearray(xw.full_page_images([rel_tag(REL + 1, 3)], [bytes(8192)], prev=primary.write_lsn))
        bad[-100] ^= 0xFF
        lsn = log.append(bytes(bad))
        primary.crash()
        assert log.records_checked_through == 0 < lsn
        with pytest.raises(CorruptWALRecordError, match=rf"CRC.*\(LSN {lsn}\)"):
            Primary(tmp_path, log=log, checkpoint_interval=0)
    finally:
        log.close()


@pytest.mark.timeout(60)
def test_truncated_and_altered_stream_messages_are_rejected(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1)
    ro.attach(1, 0, lambda m: None)
    try:
        tid = primary.insert(REL, b"one")
        rec = log.read(1, 1 << 20)[0][0].payload
        msg = encode_batch([1], [xw.wal_meta(rec)], 1, 0)
        for cut in (0, 10, 39, len(msg) - 1):
            with pytest.raises(StreamFormatError):
                ro.receive(msg[:cut])
        flipped = bytearray(msg)
        flipped[45] ^= 4
        with pytest.raises(CorruptionError):
            ro.receive(bytes(flipped))
        with pytest.raises(StreamFormatError):
            ro.receive(b"not a stream message at all")
        assert ro.counts["rejected_messages"] == 6 and ro.error is None
        ro.receive(msg)  # the node is still fine and applies the intact message
        assert ro.wait_applied(1)
        assert ro.get(REL, tid) == b"one"
        # a meta whose block headers are cut is refused by the startup worker: the node stops
        assert ro.receive(encode_batch([2], [xw.wal_meta(rec)[:30]], 2, 0)) == 1
        with pytest.raises(ReplicaError):
            ro.wait_applied(2, timeout=10)
        assert isinstance(ro.error, CorruptWALRecordError)
    finally:
        ro.close()
        primary.close()
        log.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("carrier", ["wire", "grpc"])
def test_malformed_rpc_frames_get_typed_errors(tmp_path, carrier):
    from logtide.engine.rpc import connect
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.replay.replication_rpc import REPLICATION, ReplicationServicer
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    server = DualServer("127.0.0.1:0")
    server.add_service(REPLICATION, ReplicationServicer(primary))
    server.start()
    client = connect(REPLICATION, server.address, carrier=carrier)
    try:
        with pytest.raises(CorruptionError):
            client.Feedback(data=b"\x00" * 48)
        with pytest.raises(LogtideError):
            client.Feedback(data=b"")
        with pytest.raises(LogtideError):
            list(client.StreamMeta(node_id=99, from_lsn=1))  # never subscribed
        r = client.Subscribe(node_id=5)  # the server is still up
        assert r.start_lsn == 1
    finally:
        client.close()
        server.stop(0.5)
        primary.close()
        log.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("carrier", ["wire", "grpc"])
def test_bad_tuple_requests_get_typed_errors_over_the_network(tmp_path, carrier):
    """Oversized tuples, wrong tids and missing tuples: typed errors across the wire, nothing written."""
    from logtide.engine.rpc import connect
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.errors import InvalidArgument, InvalidRequest
    from logtide.replay.primary import TupleNotFoundError
    from logtide.replay.replication_rpc import REPLAY_NODE, NodeServicer

    class Holder:
        def __init__(self, node):
            self.node = node

        def status(self):
            return self.node.stats()

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    server = DualServer("127.0.0.1:0")
    server.add_service(REPLAY_NODE, NodeServicer(Holder(primary)))
    server.start()
    client = connect(REPLAY_NODE, server.address, carrier=carrier)
    try:
        with pytest.raises(InvalidArgument):
            client.Insert(rel=REL, data=b"x" * 9000)
        with pytest.raises(InvalidArgument):
            client.Insert(rel=REL, data=b"")
        with pytest.raises(InvalidArgument):
            client.Update(rel=REL, block=0, slot=0, data=b"y")
        with pytest.raises(TupleNotFoundError):
            client.Delete(rel=REL, block=5, slot=1)
        with pytest.raises(InvalidRequest):
            client.ReadPage(tag=[1, 2, 3])
        assert primary.write_lsn == 0  # nothing reached the log
        r = client.Insert(rel=REL, data=b"fine")  # and the server still serves
        assert client.Get(rel=REL, block=r.block, slot=r.slot).data == b"fine"
        assert not client.Get(rel=REL, block=r.block, slot=r.slot + 1).found
        with pytest.raises(InvalidArgument):
            primary.insert("16384", b"x")
        with pytest.raises(InvalidArgument):
            primary.get(REL, ("a", 1))
    finally:
        client.close()
        server.stop(0.5)
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_refused_primary_writes_change_nothing(tmp_path):
    """Every primary write that raises leaves no effect: no WAL, no page change, no new block."""
    from logtide.errors import InvalidArgument
    from logtide.replay.primary import TupleNotFoundError

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    try:
        tids = primary.insert_many(REL, [b"row-%d" % i * 30 for i in range(300)])
        primary.delete(REL, tids[3])

        def state():
            return (primary.write_lsn, primary.nblocks(REL), list(primary.scan(REL)),
                    [primary.read_page(rel_tag(REL, b))[0] for b in range(primary.nblocks(REL))])

        before = state()
        last = primary.nblocks(REL)
        refused = [
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", b""])),          # a bad tuple after a good one
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", b"x" * 9000])),
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", "text"])),
            (InvalidArgument, lambda: primary.update(REL, tids[0], b"")),
            (InvalidArgument, lambda: primary.update(REL, tids[0], b"x" * 9000)),
            (TupleNotFoundError, lambda: primary.update(REL, tids[3], b"new")),          # deleted
            (TupleNotFoundError, lambda: primary.update(REL, (last, 1), b"new")),        # past the last block
            (TupleNotFoundError, lambda: primary.update(REL, (0, 999), b"new")),
            (TupleNotFoundError, lambda: primary.delete(REL, tids[3])),                  # deleted twice
            (TupleNotFoundError, lambda: primary.delete(REL, (last + 5, 1))),
            (InvalidArgument, lambda: primary.delete(REL, ("a", 1))),
            (InvalidArgument, lambda: primary.insert(-1, b"x")),
        ]
        for err, call in refused:
            with pytest.raises(err):
                call()
            assert state() == before, err
        assert primary.update(REL, tids[0], b"after") and primary.write_lsn == before[0] + 1
    finally:
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_tids_and_page_tags_that_are_not_integers_are_refused(tmp_path):
    """A float, str, bytes or bool in a tid or PageTag is refused with InvalidArgument on the
    primary and the RO node, never turned by int() into another row or page; nothing changes."""
    import numpy as np
    from logtide import PageTag
    from logtide.errors import InvalidArgument

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, background=False)
    connect_inprocess(primary, ro)
    try:
        t1, t2 = primary.insert(REL, b"one"), primary.insert(REL, b"two")
        assert (t1, t2) == ((0, 1), (0, 2))
        assert ro.wait_applied(primary.write_lsn)
        tag = rel_tag(REL, 0)

        def state():
            return (primary.write_lsn, list(primary.scan(REL)), primary.read_page(tag),
                    ro.applied_lsn, list(ro.scan(REL)), ro.read_page(tag), ro.error)

        before = state()
        bad_tids = [(0.9, 1.7), (0, 1.9), (0.5, 2.5), (0.0, 1.0), "01", b"\x00\x01", bytearray(b"\x00\x01"),
                    (False, True), (0, np.True_), np.array([0, 1]), (0, 1, 0), (0,), {0: 1}, None,
                    ("0", "1"), (0, np.float64(1.0))]
        bad_tags = ["16630", b"16630", "1663/5/16384/0/0", (1663, 5, REL, 0, 0.5), (1663, 5, REL, 0, "0"),
                    (1663, 5, REL, False, 0), [1663, 5, REL, 0, True], np.array([1663, 5, REL, 0, 0], np.float64),
                    np.array([True] * 5), np.array([[1663, 5, REL, 0, 0]]), (1663, 5, REL, 0), (1663, 5, REL, 0, -1),
                    (1663, 5, REL, 0, 1 << 32), PageTag(1663, 5, REL, 0, 0).to_bytes()]
        calls = []
        for tid in bad_tids:
            calls += [lambda tid=tid: primary.get(REL, tid), lambda tid=tid: ro.get(REL, tid),
                      lambda tid=tid: primary.update(REL, tid, b"HELLO"), lambda tid=tid: primary.delete(REL, tid)]
        for t in bad_tags:
            calls += [lambda t=t: primary.read_page(t), lambda t=t: ro.read_page(t)]
        for rel in (str(REL), float(REL), None, True):   # once, scan("16384") was an empty relation
            calls += [lambda rel=rel: primary.scan(rel), lambda rel=rel: ro.scan(rel),
                      lambda rel=rel: primary.nblocks(rel), lambda rel=rel: ro.nblocks(rel)]
        for call in calls:
            with pytest.raises(InvalidArgument):
                call()
        assert state() == before   # no row updated or deleted, nothing logged, both still agree

        # integers of every kind still address the same row and page
        for tid in [t1, list(t1), (np.int64(0), np.uint16(1)), (np.uint32(0), 1)]:
            assert primary.get(REL, tid) == ro.get(REL, tid) == b"one"
        page = before[2][0]
        for t in [PageTag(*tag), list(tag), np.array(tag, np.uint32), np.array(tag, np.int64),
                  tuple(np.uint32(v) for v in tag)]:
            assert primary.read_page(t)[0] == page and ro.read_page(t)[0] == page

        # both keep working: a real update and delete go through and reach the RO node
        t3 = primary.update(REL, t1, b"HELLO")
        primary.delete(REL, t2)
        assert ro.wait_applied(primary.write_lsn)
        assert primary.get(REL, t3) == ro.get(REL, t3) == b"HELLO"
        assert [t for t in (t1, t2) if primary.get(REL, t) is not None or ro.get(REL, t) is not None] == []
    finally:
        ro.close()   # closes the link too
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_wait_applied_refuses_an_lsn_or_timeout_that_is_not_one(tmp_path):
    """wait_applied(NaN) used to return True at once (NaN compares False): a bad LSN or timeout is
    an InvalidArgument, and the node goes on applying and serving."""
    from logtide.errors import InvalidArgument, ReplicaTimeoutError

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, background=False)
    connect_inprocess(primary, ro)
    try:
        tid = primary.insert(REL, b"one")
        assert ro.wait_applied(primary.write_lsn)
        applied = ro.applied_lsn
        for lsn in (float("nan"), float("inf"), 1.0, -1, 1 << 64, True, "1", b"1", None):
            with pytest.raises(InvalidArgument):
                ro.wait_applied(lsn)
        for timeout in (float("nan"), float("inf"), -1, "1", None, True):
            with pytest.raises(InvalidArgument):
                ro.wait_applied(applied + 1, timeout=timeout)
        assert ro.applied_lsn == applied and ro.error is None
        assert ro.wait_applied(0) and ro.wait_applied(applied, timeout=0)   # reached already: no wait
        with pytest.raises(ReplicaTimeoutError):   # the largest LSN is one: it is waited for
            ro.wait_applied((1 << 64) - 1, timeout=0.05)
        tid2 = primary.insert(REL, b"two")   # the node keeps applying and serving
        assert ro.wait_applied(primary.write_lsn, timeout=30)
        assert ro.get(REL, tid) == b"one" and ro.get(REL, tid2) == b"two"
    finally:
        ro.close()   # closes the link too
        primary.close()
        log.close()
