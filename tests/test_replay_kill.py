"""Process tests: `logtide replay primary|ro` as separate processes over one shared directory.

- An RO node killed with SIGKILL mid-stream restarts and catches up.
- The primary killed with SIGKILL: an RO node is promoted and no acknowledged write is lost.
"""
import signal
import subprocess
import threading
import time

import pytest

from replay_procs import kill as _kill, replay_client as _client, start_replay as _start

REL = 16384


def _wait_get(client, tid, want, timeout=60):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            r = client.Get(rel=REL, block=tid[0], slot=tid[1])
            last = r
            if r.found and r.data == want:
                return True
        except Exception as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"tuple {tid} never became {want[:20]!r} (last: {last!r})")


@pytest.mark.timeout(180)
def test_ro_killed_mid_stream_restarts_and_catches_up(tmp_path):
    d = str(tmp_path / "shared")
    prim, paddr = _start(tmp_path, "primary", "--dir", d, "--checkpoint-interval", "0.1", name="primary")
    ro, raddr = _start(tmp_path, "ro", "--dir", d, "--primary", paddr, "--node-id", "1", name="ro1")
    pc = _client(paddr)
    stop = threading.Event()
    written = {}

    def writer():
        i = 0
        while not stop.is_set():
            data = f"row {i}".encode() * 5
            r = pc.Insert(rel=REL, data=data)
            written[(r.block, r.slot)] = data
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(1.0)
        _kill(ro)  # mid-stream
        time.sleep(0.7)  # the primary keeps writing while the node is down
        ro, raddr = _start(tmp_path, "ro", "--dir", d, "--primary", paddr, "--node-id", "1", name="ro1")
        time.sleep(0.7)
        stop.set()
        t.join(30)
        rc = _client(raddr)
        last = max(written)
        _wait_get(rc, last, written[last])
        for tid in sorted(written)[:: max(1, len(written) // 60)]:
            r = rc.Get(rel=REL, block=tid[0], slot=tid[1])
            assert r.found and r.data == written[tid]
        rc.close()
    finally:
        stop.set()
        t.join(30)
        pc.close()
        for p in (ro, prim):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    _kill(p)


@pytest.mark.timeout(180)
def test_primary_killed_ro_promoted_no_acked_write_lost(tmp_path):
    d = str(tmp_path / "shared")
    prim, paddr = _start(tmp_path, "primary", "--dir", d, "--checkpoint-interval", "0.1", name="primary")
    ro, raddr = _start(tmp_path, "ro", "--dir", d, "--primary", paddr, "--node-id", "1", name="ro1")
    pc = _client(paddr)
    acked = {}
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            data = f"acked {i}".encode() * 3
            try:
                r = pc.Insert(rel=REL, data=data)
            except Exception:
                return  # the primary is gone: this write was never acknowledged
            acked[(r.block, r.slot)] = data
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(1.5)
        _kill(prim)
        stop.set()
        t.join(30)
        assert len(acked) > 20
        rc = _client(raddr)
        rc.Promote()
        import json
        assert json.loads(rc.Status().json)["role"] == "primary"
        for tid, data in acked.items():
            r = rc.Get(rel=REL, block=tid[0], slot=tid[1])
            assert r.found and r.data == data, tid
        r = rc.Insert(rel=REL, data=b"after promotion")  # and it takes writes
        assert rc.Get(rel=REL, block=r.block, slot=r.slot).data == b"after promotion"
        rc.close()
    finally:
        stop.set()
        t.join(30)
        pc.close()
        for p in (ro, prim):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    _kill(p)
