"""The replicated log service's framed Append batch (ReplicatedLogServicer.defer_frames_Append: raw
request bytes in, reply frames packed in C out) against a simple model on a real one-replica group:
each well-formed call gets its own LSN (a retried (client, seq) its original one), a request that
does not parse gets InvalidRequest and disturbs nobody."""
from __future__ import annotations

import threading
import time

import pytest

from logtide.engine.logservice import replicated_pb2 as pb
from logtide.engine.logservice.replicated import ReplicatedLogService, ReplicatedLogServicer, lsn_reply_frames
from logtide.engine.rpc.call_frames import unpack_replies
from logtide.errors import InvalidRequest

from ports import free_ports


def _answer(servicer, ids, datas):
    got, answered = [], threading.Event()

    def done(frames, failed):
        got.append((frames, failed))
        answered.set()
    servicer.defer_frames_Append(ids, datas, None, done)
    assert answered.wait(30), "defer_frames_Append never answered"
    assert len(got) == 1
    frames, failed = got[0]
    return {cid: pb.RLsn.FromString(body).lsn for cid, body in unpack_replies(frames)}, dict(failed)


@pytest.mark.timeout(120)
def test_framed_appends_get_their_lsns_and_bad_requests_typed_errors(tmp_path):
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    rep = ReplicatedLogService.open(tmp_path / "r1", 1, {1: addr}, addr, tick_interval=0.05)
    try:
        end = time.monotonic() + 30
        while not rep.node.is_leader():   # the lone replica elects itself after its election timeout
            assert time.monotonic() < end, "the one-replica group elected no leader"
            time.sleep(0.02)
        servicer = ReplicatedLogServicer(rep)
        req = lambda client, seq, data: pb.RAppendRequest(client=client, seq=seq, type=0, data=data).SerializeToString()  # noqa: E731
        lsns, failed = _answer(servicer, [10, 11, 12], [req(7, 1, b"a"), b"\x0a\x05ab", req(8, 1, b"b")])
        assert set(lsns) == {10, 12} and lsns[12] == lsns[10] + 1
        assert set(failed) == {11} and isinstance(failed[11], InvalidRequest)
        # a retried append (same client and seq) gets its original LSN between two new ones (its
        # entry takes a Raft index of its own, hidden from reads: the reply LSNs are not a run)
        again, failed = _answer(servicer, [20, 21, 22], [req(9, 1, b"c"), req(7, 1, b"a"), req(9, 2, b"d")])
        assert not failed
        assert again[21] == lsns[10] and lsns[12] < again[20] < again[22]
        assert [r.data for r in rep.read(1, 1 << 20)[0]] == [b"a", b"b", b"c", b"d"]
    finally:
        rep.close()


def test_lsn_reply_frames_match_one_rlsn_per_call():
    for lsns in ([5], [5, 6, 7], [5, 3, 7], [9, 10, 4], [0, 1]):
        ids = list(range(100, 100 + len(lsns)))
        assert unpack_replies(lsn_reply_frames(ids, lsns)) == [(i, pb.RLsn(lsn=x).SerializeToString())
                                                                for i, x in zip(ids, lsns)]
