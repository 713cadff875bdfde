"""Cluster metadata on the meta-service: leases, heartbeats, RO LSNs, truncation LSN, checkpoints."""
import time

import pytest

from logtide.engine.meta import MetaService
from logtide.engine.meta.cluster import Checkpoint, ClusterMeta, Heartbeater, RoLsns
from logtide.errors import MetaInvalidArgument

from meta_clock import ManualClock



@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def cm(clock):
    with MetaService.in_memory(clock=clock) as ms:
        yield ClusterMeta(ms)


def test_lease_expires_without_heartbeat_and_survives_with_it(cm, clock):
    cm.register("tn1", {"role": "tn", "addr": "a:1"}, ttl_ms=1000)
    cm.register("ro1", {"role": "ro", "addr": "a:2"}, ttl_ms=1000)
    assert set(cm.nodes()) == {"tn1", "ro1"} and set(cm.nodes("ro")) == {"ro1"}
    clock.t += 800
    assert cm.heartbeat("tn1", 1000) is True     # renewed until T0 + 1800
    clock.t += 500                                # T0 + 1300: ro1's lease has run out
    assert set(cm.nodes()) == {"tn1"}
    assert cm.heartbeat("ro1", 1000) is False    # too late: it must register again
    assert set(cm.nodes()) == {"tn1"}
    cm.register("ro1", {"role": "ro", "addr": "a:2"}, ttl_ms=1000)
    assert set(cm.nodes()) == {"tn1", "ro1"}
    cm.deregister("tn1")
    assert set(cm.nodes()) == {"ro1"}


def test_ro_lsn_reports_and_min_used_lsn_follow_the_lease(cm, clock):
    assert cm.min_used_lsn() is None
    cm.register("ro1", {"role": "ro"}, ttl_ms=1000)
    cm.register("ro2", {"role": "ro"}, ttl_ms=1000)
    cm.report_ro_lsns("ro1", 100, 90, 50, ttl_ms=1000)
    cm.report_ro_lsns("ro2", 120, 120, 70, ttl_ms=1000)
    assert cm.ro_lsns()["ro1"] == RoLsns(100, 90, 50)
    assert cm.min_used_lsn() == 50
    clock.t += 700
    cm.heartbeat("ro2", 1000)                    # renews ro2's node and report
    clock.t += 700
    assert set(cm.ro_lsns()) == {"ro2"} and cm.min_used_lsn() == 70
    with pytest.raises(MetaInvalidArgument):
        cm.report_ro_lsns("ro2", -1, 0, 0)


def test_truncation_lsn_only_moves_forward(cm):
    assert cm.truncation_lsn() == 0
    assert cm.advance_truncation_lsn(10) == 10
    assert cm.advance_truncation_lsn(5) == 10
    assert cm.advance_truncation_lsn(25) == 25
    assert cm.truncation_lsn() == 25


def test_checkpoint_locations_in_lsn_order(cm):
    cm.add_checkpoint("logtail", 300, "file:///ck/300")
    cm.add_checkpoint("logtail", 20, "file:///ck/20")
    cm.add_checkpoint("logindex", 5, "file:///li/5")
    assert [c.lsn for c in cm.checkpoints("logtail")] == [20, 300]
    assert cm.latest_checkpoint("logtail") == Checkpoint("logtail", 300, "file:///ck/300")
    assert cm.latest_checkpoint("none") is None
    assert cm.drop_checkpoints_below("logtail", 100) == 1
    assert [c.lsn for c in cm.checkpoints("logtail")] == [300]
    with pytest.raises(MetaInvalidArgument):
        cm.add_checkpoint("a/b", 1, "x")


@pytest.mark.timeout(30)
def test_heartbeater_keeps_a_real_lease_alive():
    with MetaService.in_memory() as ms:
        cm = ClusterMeta(ms)
        cm.register("n1", {"role": "cn"}, ttl_ms=1500)
        cm.register("n2", {"role": "cn"}, ttl_ms=300)
        hb = Heartbeater(cm, "n1", 1500).start()     # renews every 500 ms, long before 1500 ms
        time.sleep(1.8)
        ms.upsert("tick", b"1")                 # an entry past n2's expiry removes it
        assert set(cm.nodes()) == {"n1"} and hb.beats >= 2 and not hb.lost
        hb.stop()


def test_log_service_node_and_truncation_lsn_round_trip(cm, tmp_path):
    from logtide.engine import logservice
    from logtide.engine.meta.cluster import publish_logservice, truncate_log_to_cluster
    log = logservice.LogService.open(tmp_path / "log", truncation_interval=0)
    try:
        for i in range(20):
            log.append(b"rec%d" % i)
        log.truncate(5)
        log.register_reader("ro-1", replayed_lsn=3)
        assert publish_logservice(cm, log, "logservice-1", "127.0.0.1:7001", ttl_ms=1000) == 5
        assert cm.nodes("logservice")["logservice-1"] == {
            "role": "logservice", "addr": "127.0.0.1:7001", "latest_lsn": 20, "truncated_lsn": 5,
            "readers": {"ro-1": 3}}
        cm.advance_truncation_lsn(12)               # e.g. a TN checkpoint covers up to 12
        assert truncate_log_to_cluster(cm, log) == 12 and log.get_truncated_lsn() == 12
        cm.advance_truncation_lsn(99)               # past the log's end: only up to the end
        assert truncate_log_to_cluster(cm, log) == 20
        assert truncate_log_to_cluster(cm, log) == 20   # idempotent
    finally:
        log.close()
