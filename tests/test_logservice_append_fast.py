"""LogService.append's one-call Cython path (CommitQueue.append_user) against the general Python path:
the same arguments give the same LSN or the same typed error, and the same stored record."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logtide import LogService
from logtide.engine.logservice.record import LogRecord

pytestmark = pytest.mark.timeout(120)

MAX = 64  # max_record_size: 52 bytes of payload after the 12-byte header

payloads = st.one_of(st.binary(max_size=60), st.binary(max_size=60).map(bytearray),
                     st.binary(max_size=60).map(memoryview), st.just("text"), st.none(),
                     st.binary(max_size=20).map(lambda d: LogRecord(0, 1, d)))
replicas = st.one_of(st.integers(-2, 3), st.integers(2**64 - 2, 2**64 + 1), st.booleans(), st.just(1.0))
types = st.one_of(st.just(0), st.integers(0, 3), st.integers(-1, -1), st.just(2**32), st.just(True))


def outcome(fn):
    try:
        return fn()
    except Exception as exc:  # the model compares which typed error
        return type(exc)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    fast = LogService.open(tmp_path_factory.mktemp("fast"), max_record_size=MAX, truncation_interval=0, fsync="never")
    general = LogService.open(tmp_path_factory.mktemp("general"), max_record_size=MAX, truncation_interval=0, fsync="never")
    yield fast, general
    fast.close()
    general.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(payloads, replicas, types), min_size=1, max_size=12))
def test_fast_append_matches_the_general_path(pair, calls):
    fast, general = pair
    assert fast.append is not LogService.append  # the Cython call is bound
    first = fast.get_latest_lsn() + 1
    assert first == general.get_latest_lsn() + 1
    for payload, rid, rtype in calls:
        got = outcome(lambda: fast.append(payload, replica_id=rid, type=rtype))
        want = outcome(lambda: LogService.append(general, payload, rid, rtype))
        assert got == want, (payload, rid, rtype)
    assert fast.get_latest_lsn() == general.get_latest_lsn()
    if fast.get_latest_lsn() >= first:
        a, _ = fast.read(first, 1 << 20)
        b, _ = general.read(first, 1 << 20)
        assert [(r.lsn, r.type, r.data) for r in a] == [(r.lsn, r.type, r.data) for r in b]


def test_fast_append_after_close_is_refused(tmp_path):
    from logtide.errors import LogServiceClosed
    svc = LogService.open(tmp_path)
    assert svc.append(b"a", replica_id=3) == 1
    svc.close()
    with pytest.raises(LogServiceClosed):
        svc.append(b"b")
