"""Cluster metadata on the meta-service: leases, heartbeats, checkpoints. (RO-node LSNs and the
truncation LSN go through HAKeeper: tests/test_hakeeper_state_machine.py, tests/test_cluster_ro_truncation.py.)"""
import time

import pytest

from logtide.engine.meta import MetaService
from logtide.engine.meta.cluster import Checkpoint, ClusterMeta, Heartbeater
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
