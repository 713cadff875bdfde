"""Reopening the log: records, truncated LSN, TSO and readers survive; segments roll; a model check."""
from __future__ import annotations

import os

import pytest

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_profiles import scaled

from logtide import InvalidRange, InvalidTruncateLsn, LogService
from logtide.errors import LogServiceError

pytestmark = pytest.mark.timeout(180)


def read_all(svc, first=None, max_size=1 << 16):
    lsn = first or svc.get_first_lsn()
    out = []
    while lsn <= svc.get_latest_lsn():
        recs, lsn = svc.read(lsn, max_size)
        out += recs
    return out


def test_records_survive_reopen(tmp_path):
    with LogService.open(tmp_path) as svc:
        svc.append_many([b"p%d" % i for i in range(100)], replica_id=4)
        svc.append(b"last", type=1)
    with LogService.open(tmp_path) as svc:
        assert svc.get_latest_lsn() == 101
        recs = read_all(svc)
        assert [r.payload for r in recs] == [b"p%d" % i for i in range(100)] + [b"last"]
        assert recs[-1].type == 1 and recs[0].replica_id == 4
        assert svc.append(b"next") == 102


def test_segments_roll_and_reads_cross_them(tmp_path):
    with LogService.open(tmp_path, segment_size=4096) as svc:
        for i in range(300):
            svc.append(bytes([i % 256]) * 50)
        assert svc.stats()["segments"] > 3
        names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".log"))
        firsts = [int(n[:-4]) for n in names]
        assert firsts[0] == 1 and firsts == sorted(firsts)
        # each segment is named by the LSN of its first record
        for first in firsts:
            if first > svc.get_latest_lsn():  # the segment just rolled to is still empty
                assert first == svc.get_latest_lsn() + 1 and svc.read(first, 0) == ([], first)
                continue
            (rec,), _ = svc.read(first, 0)
            assert rec.lsn == first
        assert [r.payload for r in read_all(svc, max_size=777)] == [bytes([i % 256]) * 50 for i in range(300)]
    with LogService.open(tmp_path, segment_size=4096) as svc:
        assert len(read_all(svc)) == 300 and svc.append(b"x") == 301


@pytest.mark.parametrize("big_at", ["tail", "middle"])
def test_reopening_with_a_smaller_max_record_size_keeps_the_larger_records(tmp_path, big_at):
    """max_record_size bounds new appends only: records an earlier open took stay readable (once,
    a large last record was cut as a torn tail, and one in the middle failed the open as corrupt)."""
    big = b"c" * 5000
    payloads = [b"a", big, b"b"] if big_at == "middle" else [b"a", b"b", big]
    with LogService.open(tmp_path, max_record_size=8192) as svc:
        for p in payloads:
            svc.append(p)
    with LogService.open(tmp_path, max_record_size=1024) as svc:
        assert svc.get_latest_lsn() == 3
        assert [r.payload for r in read_all(svc)] == payloads
        with pytest.raises(LogServiceError, match="max_record_size"):
            svc.append(big)
        assert svc.append(b"d") == 4
    with LogService.open(tmp_path, max_record_size=1024) as svc:
        assert [r.payload for r in read_all(svc)] == payloads + [b"d"]


def test_truncated_lsn_tso_and_readers_survive_reopen(tmp_path):
    with LogService.open(tmp_path) as svc:
        svc.append_many([b"r"] * 20)
        svc.truncate(7)
        svc.register_reader("tn-1", 3)
        svc.report_replayed("tn-1", 12)
        ranges = [(f, f + c) for c in (1, 10, 100000) for f in [svc.get_tso_timestamp(c)]]
    with LogService.open(tmp_path) as svc:
        assert svc.get_truncated_lsn() == 7
        with pytest.raises(InvalidTruncateLsn):
            svc.truncate(7)
        with pytest.raises(InvalidRange):
            svc.read(7, 10)
        assert svc.readers() == {"tn-1": 12}
        after = svc.get_tso_timestamp(5)
        assert after >= max(end for _, end in ranges)  # disjoint from everything before the restart


def test_tso_disjoint_across_unclean_restart(tmp_path):
    """No close(): the process state is simply dropped, like a crash, and the TSO must not repeat."""
    svc = LogService.open(tmp_path, truncation_interval=0)
    top = max(svc.get_tso_timestamp(c) + c for c in (3, 1000, 7))
    svc._writer.close()  # free the fds without persisting anything more
    svc._release()
    svc._closed = True
    with LogService.open(tmp_path) as again:
        assert again.get_tso_timestamp(1) >= top


def test_directory_is_locked(tmp_path):
    with LogService.open(tmp_path):
        with pytest.raises(LogServiceError, match="in use"):
            LogService.open(tmp_path)
    LogService.open(tmp_path).close()


class LogModel(RuleBasedStateMachine):
    """The log against a list: appends, reads, truncations and reopens in any order."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.svc = LogService.open(self.tmp.name, segment_size=2048, fsync="never", truncation_interval=0)
        self.model: list[bytes] = []
        self.truncated = 0

    @rule(p=st.binary(max_size=200), rid=st.integers(0, 3))
    def append(self, p, rid):
        assert self.svc.append(p, replica_id=rid) == len(self.model) + 1
        self.model.append(p)

    @rule(ps=st.lists(st.binary(max_size=100), min_size=1, max_size=20))
    def append_many(self, ps):
        assert self.svc.append_many(ps) == len(self.model) + 1
        self.model += ps

    @precondition(lambda self: len(self.model) > self.truncated)
    @rule(data=st.data(), max_size=st.integers(0, 1500))
    def read(self, data, max_size):
        lsn = data.draw(st.integers(self.truncated + 1, len(self.model)))
        recs, nxt = self.svc.read(lsn, max_size)
        assert recs and recs[0].lsn == lsn and nxt == lsn + len(recs)
        assert [r.payload for r in recs] == self.model[lsn - 1:nxt - 1]
        assert len(recs) == 1 or sum(len(r.data) for r in recs) <= max_size

    @rule(data=st.data())
    def truncate(self, data):
        lsn = data.draw(st.integers(0, len(self.model) + 2))
        if self.truncated < lsn <= len(self.model):
            self.svc.truncate(lsn)
            self.truncated = lsn
            self.svc.run_truncation()
        else:
            with pytest.raises(InvalidTruncateLsn):
                self.svc.truncate(lsn)

    @rule()
    def reopen(self):
        self.svc.close()
        self.svc = LogService.open(self.tmp.name, segment_size=2048, fsync="never", truncation_interval=0)

    @invariant()
    def ends_agree(self):
        assert self.svc.get_latest_lsn() == len(self.model)
        assert self.svc.get_truncated_lsn() == self.truncated
        assert self.svc.get_first_lsn() == self.truncated + 1

    def teardown(self):
        self.svc.close()
        self.tmp.cleanup()


TestLogModel = LogModel.TestCase
TestLogModel.settings = scaled(max_examples=40, stateful_step_count=30, deadline=None)


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b"{}", b'{"index": "x", "truncated_lsn": 0, "tso_limit": 0, "readers": {}}',
                                  b'{"index": 1, "truncated_lsn": 0, "tso_limit": 0, "readers": [1]}'])
def test_a_state_snapshot_of_the_wrong_shape_is_a_corruption_error_naming_the_file(tmp_path, body):
    """A state file whose CRC holds but whose body is not a state (edited by hand, or written by a
    bug) raised a bare TypeError or KeyError; the log's records stay readable once it is removed."""
    import struct

    from logtide.engine.logservice.log_format import STATE_FILE
    from logtide.engine.logservice.state_machine import SNAPSHOT_MAGIC
    from logtide._ext.crc32c import crc32c
    from logtide.errors import CorruptionError
    with LogService.open(tmp_path) as svc:
        svc.append_many([b"a", b"b"])
    state = tmp_path / STATE_FILE
    state.write_bytes(SNAPSHOT_MAGIC + body + struct.pack("<II", len(body), crc32c(body)))
    with pytest.raises(CorruptionError, match=str(state)):
        LogService.open(tmp_path)
    state.unlink()
    with LogService.open(tmp_path) as svc:
        assert [r.payload for r in read_all(svc)] == [b"a", b"b"]
