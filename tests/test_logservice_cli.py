"""`logtide logservice serve|info` and the demo's log service stage, as installed commands."""
from __future__ import annotations

import signal
import subprocess

import pytest
from logtide_cli import logtide_cmd

pytestmark = pytest.mark.timeout(180)


def test_serve_then_info(tmp_path):
    from logtide import connect_logservice
    from logtide.errors import InvalidTruncateLsn
    p = subprocess.Popen(logtide_cmd() + ["logservice", "serve", "--dir", str(tmp_path / "log"), "--listen",
                                       "127.0.0.1:0", "--stats-interval", "0.2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        line = p.stdout.readline()
        address = line.split(" on ")[1].split()[0]
        with connect_logservice(address) as c:
            assert c.append_many([b"a", b"b", b"c"], replica_id=2) == 1
            c.truncate(1)
            with pytest.raises(InvalidTruncateLsn):
                c.truncate(1)
            for _ in range(100):  # the periodic status line (every 0.2 s) catches up with the appends
                if "latest LSN 3," in p.stdout.readline():
                    break
            else:
                raise AssertionError("no status line showed latest LSN 3")
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped" in err
    info = subprocess.run(logtide_cmd() + ["logservice", "info", "--dir", str(tmp_path / "log")],
                          capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    assert "latest LSN:     3" in info.stdout and "truncated LSN:  1" in info.stdout


def test_serve_refuses_a_bad_listen_address(tmp_path):
    p = subprocess.run(logtide_cmd() + ["logservice", "serve", "--dir", str(tmp_path), "--listen", "256.1.1.1:9999"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "could not listen" in p.stderr


def test_demo_logservice_stage(tmp_path):
    p = subprocess.run(logtide_cmd() + ["demo", "--only", "logservice", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=170)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "-- logservice: PASS" in p.stdout and "bad records: 0" in p.stdout
    assert "records per fdatasync" in p.stdout and "framed carrier at 127.0.0.1:" in p.stdout
