"""The flusher's group forming (CommitQueue.run: group words, commit delay, the nap while it expects a
group) against a model, with real appender threads on a real log (fsync="always").

Bursts of concurrent appenders alternate with pauses long enough for the flusher's nap to end with
nothing queued (so it stops expecting a group) or short enough to land inside it. The model: every
append returns, with an LSN of its own; the LSNs handed out are exactly 1..n; the log read back
(after a reopen) holds at each LSN the payload of the append that got it; and appends of one
thread get increasing LSNs (each waits for its own before the next)."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide import LogService

pytestmark = pytest.mark.timeout(300)

JOIN = 60.0  # seconds an append may take on a loaded CI machine before the test calls it hung

bursts = st.lists(
    st.tuples(st.integers(1, 12),                      # appender threads
              st.integers(1, 6),                       # appends each (every third one an append_many)
              st.sampled_from([0.0, 0.0002, 0.004])),  # pause after the burst: none, inside the nap, past it
    min_size=1, max_size=6)


@scaled(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=bursts)
def test_groups_form_and_settle_like_the_model(tmp_path_factory, plan):
    path = tmp_path_factory.mktemp("groups")
    got: dict[int, bytes] = {}
    order: dict[tuple[int, int], list[int]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    svc = LogService.open(path, fsync="always", truncation_interval=0)
    try:
        for b, (nthreads, each, pause) in enumerate(plan):
            go = threading.Barrier(nthreads)

            def work(t, b=b, each=each, go=go):
                try:
                    go.wait()
                    mine = []
                    for i in range(each):
                        if i % 3 == 2:
                            ps = [b"%d.%d.%d.a" % (b, t, i), b"%d.%d.%d.b" % (b, t, i)]
                            first = svc.append_many(ps, replica_id=t)
                            pairs = [(first, ps[0]), (first + 1, ps[1])]
                        else:
                            p = b"%d.%d.%d" % (b, t, i)
                            pairs = [(svc.append(p, replica_id=t), p)]
                        mine += [lsn for lsn, _ in pairs]
                        with lock:
                            for lsn, p in pairs:
                                assert lsn not in got, f"LSN {lsn} handed out twice"
                                got[lsn] = p
                    order[(b, t)] = mine
                except BaseException as exc:  # noqa: B902 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(nthreads)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(JOIN)
                assert not th.is_alive(), "an append never returned"
            assert not errors, errors
            time.sleep(pause)
        n = len(got)
        assert sorted(got) == list(range(1, n + 1))
        assert all(lsns == sorted(lsns) for lsns in order.values())
        assert svc.get_latest_lsn() == n
    finally:
        svc.close()
    with LogService.open(path, truncation_interval=0) as again:
        lsn, recs = 1, []
        while lsn <= n:
            batch, lsn = again.read(lsn, 1 << 16)
            recs += batch
        assert {r.lsn: r.payload for r in recs} == got


