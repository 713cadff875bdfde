"""Cluster metadata on the meta-service: leases, heartbeats, checkpoints. (RO-node LSNs and the
truncation LSN go through HAKeeper: tests/test_hakeeper_state_machine.py, tests/test_cluster_ro_truncation.py.)"""
import os
import subprocess
import sys
import time

import pytest

from logtide.engine.meta import MetaService
from logtide.engine.meta.cluster import Checkpoint, ClusterMeta, Heartbeater
from logtide.errors import MetaInvalidArgument

from meta_clock import ManualClock


def _serve_meta(tmp_path, addr, name):
    """`logtide meta serve` on tmp_path/meta at addr, once it listens (its output in tmp_path/<name>.log)."""
    exe = os.path.join(os.path.dirname(sys.executable), "logtide")
    log = tmp_path / f"{name}.log"
    p = subprocess.Popen([exe, "meta", "serve", "--dir", str(tmp_path / "meta"), "--listen", addr],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    end = time.monotonic() + 60
    while "listening on" not in log.read_text():
        assert time.monotonic() < end and p.poll() is None, log.read_text()
        time.sleep(0.05)
    return p


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


def test_heartbeater_refuses_a_bad_lease_or_node_id(cm):
    for ttl in (0, 2, -5, 1.5, True, None, "1000"):
        with pytest.raises(MetaInvalidArgument):
            Heartbeater(cm, "n1", ttl)
    with pytest.raises(MetaInvalidArgument):
        Heartbeater(cm, "a/b", 1000)
    for interval in (0, 1000, 5000, 1.5, True, "10"):
        with pytest.raises(MetaInvalidArgument):
            Heartbeater(cm, "n1", 1000, interval)
    assert Heartbeater(cm, "n1", 9000).interval_ms == 3000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["blackhole", "stop", "kill"])
def test_heartbeater_outlives_a_silent_meta_service(tmp_path, how):
    """A real `logtide meta serve` behind a proxy, blackholed, SIGSTOPped or SIGKILLed (and
    restarted on its directory and port) for a few renewal periods but less than the lease:
    renewals fail, the thread goes on, and once healed it keeps the lease. Blackholed for longer
    than the lease: it ran out, and the first renewal after the heal reports it lost.
    The killed server's outage includes its restart, which on a loaded host has taken longer
    than 9 s: that case gets a 40 s lease, renewed every 3 s as in the others."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from frozen import freeze, thaw
    from ports import free_ports
    from tcp_proxy import TcpProxy
    from logtide.engine.meta.client import connect_meta

    addr = f"127.0.0.1:{free_ports(1)[0]}"
    srv = _serve_meta(tmp_path, addr, "meta")
    proxy = client = direct = hb = None
    try:
        proxy = TcpProxy(addr)
        client = connect_meta(proxy.address, timeout=0.5, follow_leader=False)
        direct = ClusterMeta(connect_meta(addr))
        cm = ClusterMeta(client)
        ttl = 40000 if how == "kill" else 9000      # renewals every 3 s
        cm.register("n1", {"role": "cn"}, ttl_ms=ttl)
        hb = Heartbeater(cm, "n1", ttl, 3000).start()
        start = time.monotonic()
        time.sleep(3.5)
        assert hb.beats >= 1
        # the renewal at ~6 s fails; the lease lasts to ~12 s (~43 s when killed)
        if how == "blackhole":
            proxy.blackhole(True)
        elif how == "stop":
            freeze(srv.pid)
        else:
            srv.kill()
            srv.wait()
        time.sleep(3.5)
        if how == "blackhole":
            proxy.blackhole(False)
        elif how == "stop":
            thaw(srv.pid)
        else:
            srv = _serve_meta(tmp_path, addr, "meta-restarted")
        healed = time.monotonic()
        end = healed + 20
        beats = hb.beats
        while hb.beats <= beats:
            assert not hb.lost, f"the lease ran out: the heal came {healed - start:.1f} s after the heartbeater started"
            assert time.monotonic() < end, "no renewal after the heal"
            time.sleep(0.1)
        assert hb.failures >= 1 and not hb.lost and "n1" in direct.nodes()
        if how != "blackhole":
            return

        proxy.blackhole(True)                        # longer than the lease
        end = time.monotonic() + ttl / 1000 + 3
        while "n1" in direct.nodes():
            assert time.monotonic() < end, "the lease outlived its TTL"
            time.sleep(0.2)
        proxy.blackhole(False)
        end = time.monotonic() + 20
        while not hb.lost:
            assert time.monotonic() < end, "a renewal after the lease ran out did not report it lost"
            time.sleep(0.1)
    finally:
        if hb is not None:
            hb.stop()
        for c in (client, direct.meta if direct else None):
            if c is not None:
                c.close()
        if proxy is not None:
            proxy.close()
        if srv.poll() is None:
            thaw(srv.pid)
            srv.kill()
        srv.wait()


@pytest.mark.timeout(120)
def test_heartbeater_retries_a_failed_renewal_before_the_next_period(tmp_path):
    """A renewal refused because the meta-service is down is retried within the period (it only
    extends the lease, so a repeat is harmless), and the lease is kept once the server is back.
    A real `logtide meta serve`, SIGKILLed and restarted on its directory and port."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ports import free_ports
    from logtide.engine.meta.client import connect_meta

    addr = f"127.0.0.1:{free_ports(1)[0]}"
    srv = _serve_meta(tmp_path, addr, "meta")
    client = hb = None
    try:
        client = connect_meta(addr, timeout=0.5, follow_leader=False)
        cm = ClusterMeta(client)
        cm.register("n1", {"role": "cn"}, ttl_ms=60000)
        hb = Heartbeater(cm, "n1", 60000, 3000).start()    # a renewal every 3 s
        end = time.monotonic() + 20
        while hb.beats < 1:
            assert time.monotonic() < end, "no renewal"
            time.sleep(0.05)
        srv.kill()
        srv.wait()
        end = time.monotonic() + 20
        while hb.failures < 1:
            assert time.monotonic() < end, "a renewal against a dead server did not fail"
            time.sleep(0.02)
        time.sleep(2.0)                 # within the 3 s period: only retries can fail meanwhile
        assert hb.failures >= 3, f"{hb.failures} failed renewals in 2 s: not retried before the period"
        srv = _serve_meta(tmp_path, addr, "meta-restarted")
        beats = hb.beats
        end = time.monotonic() + 20
        while hb.beats <= beats:
            assert time.monotonic() < end and not hb.lost, "no renewal after the restart"
            time.sleep(0.05)
        assert not hb.lost and "n1" in cm.nodes()
    finally:
        if hb is not None:
            hb.stop()
        if client is not None:
            client.close()
        srv.kill()
        srv.wait()
