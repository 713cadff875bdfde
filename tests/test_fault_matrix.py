"""The fault matrix (issue 10): each pair of peers over real processes on loopback, each facing four
faults: the peer is SIGKILLed, SIGSTOPped (it holds its socket and answers nothing), cut off by a
TCP proxy that blackholes its traffic, or half cut off by one that delivers the client's bytes and
withholds the server's (mute: requests land, their answers never come).

In every case the surviving side keeps serving its other clients and never hangs: its waits end in
typed errors within the configured timeouts (short ones, set through the CLI and the environment
the processes read: engine/rpc/deadlines.py). After the fault heals (restart, SIGCONT, proxy open)
the peer rejoins, and its state is compared with a model built from scratch.

| pair                        | faulted   | survivor checks                                            |
|-----------------------------|-----------|------------------------------------------------------------|
| primary <-> RO (framed)     | RO        | inserts never stall; RO dropped within replica timeout     |
| TN <-> CN (framed)          | TN        | CN serves reads at its watermark; waits past it time out   |
| log-service client <-> server | server  | calls end in RpcError / DeadlineExceededError              |
| meta client <-> server      | server    | calls end in MetaUnavailableError / MetaDeadlineExceeded   |
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frozen import all_stopped  # noqa: E402
from tcp_proxy import TcpProxy  # noqa: E402

from logtide.errors import (DeadlineExceededError, MetaUnavailableError, PeerTimeoutError, ReplicaError, RpcError,
                            WatermarkTimeoutError)

FAULTS = ("kill", "stop", "blackhole", "mute")
CALL_S = 2.0          # unary call deadline of every client in these tests
KEEPALIVE_S = 0.5     # keepalive ping interval ...
KEEPALIVE_WAIT_S = 1.0  # ... and how long a ping may go unanswered
REPLICA_S = 1.5       # the primary's replica timeout
SLACK_S = 3.0         # scheduling slack on a loaded 2-core machine
ENV = dict(os.environ, LOGTIDE_RPC_TIMEOUT=str(CALL_S), LOGTIDE_RPC_KEEPALIVE=str(KEEPALIVE_S),
           LOGTIDE_RPC_KEEPALIVE_TIMEOUT=str(KEEPALIVE_WAIT_S))
RPC = dict(timeout=CALL_S, keepalive=KEEPALIVE_S, keepalive_timeout=KEEPALIVE_WAIT_S)
REL = 16384


class Procs:
    """The CLI processes a test starts; all of them are resumed and killed at the end."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.live: list[subprocess.Popen] = []

    def start(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"{name}.log"
        out = open(log, "ab")
        exe = Path(sys.executable).with_name("logtide")
        p = subprocess.Popen([str(exe), *args], cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        out.close()
        self.live.append(p)
        return p, log

    def wait_for(self, p: subprocess.Popen, log: Path, pattern: str, timeout: float = 60) -> re.Match:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = re.search(pattern, log.read_text(errors="replace"))
            if m:
                return m
            if p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{log.name}: no {pattern!r}:\n" + log.read_text(errors="replace")[-3000:])

    def cleanup(self) -> None:
        for p in self.live:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
            p.wait(10)


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    ps.cleanup()


def _fault(kind: str, p: subprocess.Popen, proxy: TcpProxy) -> None:
    if kind == "kill":
        p.kill()
        p.wait(10)
    elif kind == "stop":
        os.kill(p.pid, signal.SIGSTOP)
        _until(lambda: all_stopped(p.pid), 10, f"every thread of {p.pid} stopped")
    elif kind == "mute":
        proxy.mute_replies(True)
    else:
        proxy.blackhole(True)


def _until(check, timeout: float, what: str):
    """Poll `check()` until it returns a true value; that value, or AssertionError after `timeout` s."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            v = check()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - the peer may still be coming back
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout:g} s (last error: {last!r})")


def _elapsed_raises(exc_types, fn, limit: float):
    """fn() must raise one of exc_types within `limit` seconds."""
    t0 = time.monotonic()
    with pytest.raises(exc_types) as info:
        fn()
    took = time.monotonic() - t0
    assert took < limit, f"{info.value!r} came after {took:.1f} s (limit {limit:g} s)"
    return info.value


# ---------------------------------------------------------------------- primary <-> RO over gRPC

def _status(client) -> dict:
    return json.loads(client.Status(timeout=CALL_S).json)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
def test_primary_and_ro_node(procs, tmp_path, fault):
    from logtide.engine.rpc import connect
    from logtide.replay.replication_rpc import REPLAY_NODE
    d = str(tmp_path / "shared")
    prim, plog = procs.start("primary", "replay", "primary", "--dir", d, "--checkpoint-interval", "0.1",
                             "--pool-pages", "16", "--replica-timeout", str(REPLICA_S),
                             "--port-file", str(tmp_path / "primary.port"))
    paddr = "127.0.0.1:" + procs.wait_for(prim, plog, r"primary serving on 127\.0\.0\.1:(\d+)").group(1)
    proxy = TcpProxy(paddr)            # the RO node reaches the primary only through the proxy
    ro_args = ("replay", "ro", "--dir", d, "--primary", proxy.address, "--node-id", "2",
               "--replica-timeout", str(REPLICA_S))
    ro, rlog = procs.start("ro2", *ro_args)
    raddr = "127.0.0.1:" + procs.wait_for(ro, rlog, r"serving on 127\.0\.0\.1:(\d+)").group(1)
    pc = connect(REPLAY_NODE, paddr, **RPC)
    rc = connect(REPLAY_NODE, raddr, **RPC)
    model = {}
    try:
        for i in range(20):
            data = f"before {i}".encode() * 20
            r = pc.Insert(rel=REL, data=data)
            model[(r.block, r.slot)] = data
        lsn = _status(pc)["write_lsn"]
        _until(lambda: _status(rc)["applied_lsn"] >= lsn, 30, "the RO node applied the first writes")
        assert "2" in _status(pc)["replicas"]

        _fault(fault, ro, proxy)
        # the primary keeps serving its writers: more pages than its pool holds, whose flushing the
        # faulted node's last report would block for good if it were not dropped
        for i in range(40):
            data = bytes([i]) * 7000
            r = pc.Insert(rel=REL, data=data, timeout=30)
            model[(r.block, r.slot)] = data
        def dropped():
            s = _status(pc)
            return s if "2" not in s["replicas"] else None
        st = _until(dropped, REPLICA_S + SLACK_S, "the primary dropped the faulted RO node")
        assert st["replicas_dropped"] >= 1 and "2" in st["dropped"]
        # waits on the faulted node end in typed errors within the configured timeouts
        if fault == "kill":
            _elapsed_raises(RpcError, lambda: rc.Get(rel=REL, block=0, slot=1), CALL_S + SLACK_S)
        elif fault == "stop":
            _elapsed_raises(DeadlineExceededError, lambda: rc.Get(rel=REL, block=0, slot=1), CALL_S + SLACK_S)
        else:   # cut off from the primary, the node stops serving on its own (storage may pass it by)
            err = _until(lambda: _get_error(rc), REPLICA_S + SLACK_S, "the cut-off RO node refused reads")
            assert "re-syncing" in err

        # heal; the node rejoins and ends identical to the model
        if fault == "kill":
            ro, rlog = procs.start("ro2-restarted", *ro_args)
            raddr = "127.0.0.1:" + procs.wait_for(ro, rlog, r"serving on 127\.0\.0\.1:(\d+)").group(1)
            rc.close()
            rc = connect(REPLAY_NODE, raddr, **RPC)
        elif fault == "stop":
            os.kill(ro.pid, signal.SIGCONT)
        else:
            proxy.blackhole(False)
            proxy.mute_replies(False)
        data = b"after the fault"
        r = pc.Insert(rel=REL, data=data)
        model[(r.block, r.slot)] = data
        lsn = _status(pc)["write_lsn"]
        _until(lambda: _status(rc)["applied_lsn"] >= lsn and _get_error(rc) is None, 30,
               "the RO node rejoined and caught up")
        for (block, slot), data in model.items():
            got = rc.Get(rel=REL, block=block, slot=slot)
            assert got.found and got.data == data, (block, slot)
        assert "2" in _status(pc)["replicas"]
        if fault != "kill":
            assert _status(rc)["resyncs"] >= 1
            procs.wait_for(ro, rlog, r"re-synced from storage", timeout=5)
        # and the primary still stops on SIGTERM (it ignored it while its inserts hung)
        prim.terminate()
        assert prim.wait(15) == 0
    finally:
        pc.close()
        rc.close()
        proxy.close()


def _get_error(rc) -> str | None:
    """The typed error message of a read on the RO node, or None if it answers."""
    try:
        rc.Get(rel=REL, block=0, slot=1)
        return None
    except ReplicaError as exc:
        return str(exc)


# ---------------------------------------------------------------------- TN <-> CN over gRPC

def _read(cn, ts):
    t = cn.read("t", ts, timeout=30)
    return t.num_rows, int(t.column("id").to_numpy().sum())


@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", FAULTS)
def test_tn_and_cn(procs, tmp_path, fault):
    from logtide.engine.logtail import ComputeNode
    from logtide.engine.logtail.transport import RemoteStream
    from logtide.engine.objectstore import ObjectStore
    d = str(tmp_path / "tn")
    args = ("logtail", "tn", d, "--load", "40", "--flush-every", "0.5", "--checkpoint-every", "1.5")
    tn, tlog = procs.start("tn", *args)
    info = json.loads(procs.wait_for(tn, tlog, r"(\{\"listening\".*\})").group(1))
    proxy = TcpProxy(info["listening"])
    store = ObjectStore(info["objects"])
    cn = ComputeNode(lambda: RemoteStream(proxy.address, "matrix", **RPC), store, "matrix")
    fresh = None
    try:
        cn.subscribe("t")
        _until(lambda: _read(cn, cn.watermark("t"))[0] > 20, 30, "the CN saw the load")

        _fault(fault, tn, proxy)
        time.sleep(KEEPALIVE_S + KEEPALIVE_WAIT_S + 0.5)    # the stream is dead (or about to be) by now
        wm = cn.watermark("t")
        # the CN keeps serving its readers at what it has ...
        assert _read(cn, wm)[0] > 0
        # ... and a wait past it ends in a typed error at its deadline
        t0 = time.monotonic()
        with pytest.raises(WatermarkTimeoutError):
            cn.read("t", wm + (1 << 40), timeout=1.0)
        assert time.monotonic() - t0 < 1.0 + SLACK_S

        if fault == "kill":   # restart on the same directory (a new port: the proxy follows it)
            tn, tlog = procs.start("tn-restarted", *args)
            info = json.loads(procs.wait_for(tn, tlog, r"(\{\"listening\".*\})").group(1))
            proxy.retarget(info["listening"])
        elif fault == "stop":
            os.kill(tn.pid, signal.SIGCONT)
        else:
            proxy.blackhole(False)
            proxy.mute_replies(False)
        # the CN reconnects and follows again; then it equals a CN built from scratch at the same ts
        _until(lambda: cn.watermark("t") > wm, 30, "the CN's watermark moved after the fault healed")
        fresh = ComputeNode(lambda: RemoteStream(info["listening"], "scratch", **RPC), store, "scratch")
        fresh.subscribe("t")
        ts = max(cn.watermark("t"), fresh.watermark("t"))
        fresh.wait_for("t", ts, timeout=30)
        cn.wait_for("t", ts, timeout=30)
        assert _read(cn, ts) == _read(fresh, ts)
        # not empty; not "> 20" as before the fault: a restarted TN's load draws the same ids again
        # (its seed is fixed), deleting or updating rows of its first life, so fewer may be left
        assert _read(cn, ts)[0] > 0
    finally:
        cn.close()
        if fresh is not None:
            fresh.close()
        proxy.close()


@pytest.mark.timeout(120)
def test_tn_survives_a_stopped_cn(procs, tmp_path):
    """The other direction of TN <-> CN: a CN process stopped with SIGSTOP holds its stream open and
    reads nothing; the TN's keepalive ends that stream, the TN keeps pushing to its other CN, and the
    stopped CN catches up after SIGCONT."""
    from logtide.engine.logtail import ComputeNode, TransactionNode
    from logtide.engine.logtail.service import serve
    from logtide.engine.logtail.transport import RemoteStream
    tn = TransactionNode.open(tmp_path / "tn")
    tn.create_table("t", {"id": "int64"}, "id")
    server, addr = serve(tn, "127.0.0.1:0", keepalive=KEEPALIVE_S, keepalive_timeout=KEEPALIVE_WAIT_S)
    other = ComputeNode(lambda: RemoteStream(addr, "other", **RPC), tn.store, "other")
    n = 0

    def commit():
        nonlocal n
        x = tn.begin()
        x.insert("t", {"id": [n]})
        n += 1
        return x.commit()
    try:
        other.subscribe("t")
        cn, clog = procs.start("cn", "logtail", "cn", "--tn", addr, "--objects", tn.store.uri, "--table", "t")
        procs.wait_for(cn, clog, r'"rows"')
        _until(lambda: tn.stream_count == 2, 10, "both CNs have a stream")
        os.kill(cn.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        # the ping deadline is 1.5 s; the rest is for a loaded machine (the loop ends as soon as it happens)
        while time.monotonic() - t0 < KEEPALIVE_S + KEEPALIVE_WAIT_S + 5 * SLACK_S:
            ts = commit()
            other.wait_for("t", ts, timeout=CALL_S)      # the TN keeps serving its other CN
            if tn.stream_count == 1:
                break
            time.sleep(0.05)
        assert tn.stream_count == 1, "the stopped CN's stream was not ended"
        os.kill(cn.pid, signal.SIGCONT)
        ts = commit()
        want = other.read("t", ts, timeout=30).num_rows
        assert want == n
        procs.wait_for(cn, clog, rf'"rows": {n}, "id_sum": {n * (n - 1) // 2}', timeout=30)
    finally:
        other.close()
        server.stop(0.5)
        tn.close()


# ---------------------------------------------------------------------- log-service client <-> server

@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
def test_logservice_client_and_server(procs, tmp_path, fault):
    from logtide.engine.logservice import connect_logservice
    d = str(tmp_path / "log")
    args = ("logservice", "serve", "--dir", d, "--stats-interval", "0")
    srv, slog = procs.start("logservice", *args)
    addr = procs.wait_for(srv, slog, r"on (127\.0\.0\.1:\d+)").group(1)
    proxy = TcpProxy(addr)
    client = connect_logservice(proxy.address, timeout=CALL_S)
    model = []
    try:
        for i in range(30):
            payload = f"record {i}".encode()
            assert client.append(payload) == len(model) + 1
            model.append(payload)

        _fault(fault, srv, proxy)
        # the client's calls end in typed errors within the deadline, never hang
        err = _elapsed_raises(RpcError, lambda: client.get_latest_lsn(), CALL_S + SLACK_S)
        if fault != "kill":
            assert isinstance(err, PeerTimeoutError)
        # a write in flight has an unknown outcome: it may land once the server runs again
        doubt = b"appended during the fault"
        _elapsed_raises(RpcError, lambda: client.append(doubt), CALL_S + SLACK_S)

        if fault == "kill":
            srv, slog = procs.start("logservice-restarted", *args)
            proxy.retarget(procs.wait_for(srv, slog, r"on (127\.0\.0\.1:\d+)").group(1))
        elif fault == "stop":
            os.kill(srv.pid, signal.SIGCONT)
        else:
            proxy.blackhole(False)
            proxy.mute_replies(False)
        # the same client works again once the server answers
        latest = _until(lambda: client.get_latest_lsn() or True, 30, "the client reached the server again")
        for i in range(5):
            payload = f"after {i}".encode()
            lsn = client.append(payload)
            if lsn == len(model) + 2:          # the write in doubt landed before it, exactly once
                model.append(doubt)
            assert lsn == len(model) + 1
            model.append(payload)
        got, nxt = client.read(1, 1 << 20)
        assert [r.payload for r in got] == model
        assert latest
    finally:
        client.close()
        proxy.close()


# ---------------------------------------------------------------------- meta client <-> server

@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
def test_meta_client_and_server(procs, tmp_path, fault):
    from logtide.engine.meta.client import connect_meta
    d = str(tmp_path / "meta")
    args = ("meta", "serve", "--dir", d)
    srv, slog = procs.start("meta", *args)
    addr = procs.wait_for(srv, slog, r"listening on (127\.0\.0\.1:\d+)").group(1)
    proxy = TcpProxy(addr)
    # follow_leader=False: the server names its own address as the leader, and a client that
    # followed it would go around the proxy whose faults this test is about
    client = connect_meta(proxy.address, timeout=CALL_S, follow_leader=False)
    model = {}
    try:
        for i in range(20):
            client.upsert(f"k{i:02d}", f"v{i}".encode())
            model[f"k{i:02d}"] = f"v{i}".encode()

        _fault(fault, srv, proxy)
        err = _elapsed_raises(MetaUnavailableError, lambda: client.get("k00"), CALL_S + SLACK_S)
        if fault != "kill":
            assert isinstance(err, PeerTimeoutError)
        _elapsed_raises(MetaUnavailableError, lambda: client.upsert("doubt", b"x"), CALL_S + SLACK_S)

        if fault == "kill":
            srv, slog = procs.start("meta-restarted", *args)
            proxy.retarget(procs.wait_for(srv, slog, r"listening on (127\.0\.0\.1:\d+)").group(1))
        elif fault == "stop":
            os.kill(srv.pid, signal.SIGCONT)
        else:
            proxy.blackhole(False)
            proxy.mute_replies(False)
        _until(lambda: client.get("k00") is not None, 30, "the client reached the server again")
        for i in range(20, 25):
            client.upsert(f"k{i:02d}", f"v{i}".encode())
            model[f"k{i:02d}"] = f"v{i}".encode()
        got = {k: v.data for k, v in client.list("k")}
        assert got == model
        doubt = client.get("doubt")          # the write in doubt: applied once, or not at all
        assert doubt is None or doubt.data == b"x"
    finally:
        client.close()
        proxy.close()
