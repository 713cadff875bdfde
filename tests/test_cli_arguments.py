"""Bad command-line arguments are refused up front: exit status 2, one error line on stderr (after
argparse's usage, for a usage error) naming the option or value, no traceback, and nothing created
or changed in the directories the command was given. Also parse_lsn's range and the log service's
smallest message limit, through their public functions."""
from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import pytest

from logtide_cli import logtide_cmd

pytestmark = pytest.mark.timeout(120)

PEERS = ["--id", "1", "--peers", "1=127.0.0.1:59871"]    # never bound: every case below is refused first

# (argv with {d} for the test's directory, text the error line must hold)
REFUSED = [
    # LSNs: negative or past u64 (a plain integer), and the X/X forms
    (["logindex", "query", "--dir", "{d}/idx", "--tag", "1663/5/16384/0/3", "--from", "-5"], "--from"),
    (["logindex", "query", "--dir", "{d}/idx", "--to", "-5"], "--to"),
    (["logindex", "query", "--dir", "{d}/idx", "--to", "99999999999999999999999"], "--to"),
    (["logindex", "query", "--dir", "{d}/idx", "--from", str(1 << 64)], "--from"),
    (["logindex", "query", "--dir", "{d}/idx", "--from", "1/-2"], "--from"),
    (["logindex", "build", "--pg-wal", "{d}/wal", "--out", "{d}/idx", "--from", "-5"], "--from"),
    (["logindex", "build", "--pg-wal", "{d}/wal", "--out", "{d}/idx", "--from", "999999999999999999999"], "--from"),
    (["spark", "pg-changed-pages", "--pg-wal", "{d}/wal", "--from", "-1", "--to", "0/10", "--out", "{d}/o"],
     "--from"),
    # Raft ticks and the other counts of the replicas
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--tick", "0"], "--tick"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--tick", "-1"], "--tick"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--tick", "nan"], "--tick"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--tick", "inf"], "--tick"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--tick", "1e-9"], "--tick"),     # would spin a CPU
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--election-tick", "1"], "--election-tick"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--snapshot-entries", "0"], "--snapshot-entries"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--compact-keep", "-1"], "--compact-keep"),
    (["meta", "serve", "--dir", "{d}/m", "--raft", *PEERS, "--request-timeout", "0"], "--request-timeout"),
    (["meta", "member", "promote", "2", "--meta", "127.0.0.1:1", "--timeout", "-1"], "--timeout"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--tick", "0"], "--tick"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--tick", "0.0001"], "--tick"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--hakeeper-tick", "1e-6"], "--hakeeper-tick"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--election-tick", "0"], "--election-tick"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--snapshot-entries", "-1"], "--snapshot-entries"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--compact-keep", "-1"], "--compact-keep"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--hakeeper-tick", "0"], "--hakeeper-tick"),
    (["logservice", "serve", "--dir", "{d}/l", "--raft", *PEERS, "--stats-interval", "-1"], "--stats-interval"),
    (["hakeeper", "serve", *PEERS, "--dir", "{d}/h", "--hakeeper-tick", "-1"], "--hakeeper-tick"),
    (["hakeeper", "serve", *PEERS, "--dir", "{d}/h", "--hakeeper-check-interval", "0"],
     "--hakeeper-check-interval"),
    (["hakeeper", "serve", *PEERS, "--dir", "{d}/h", "--hakeeper-election-tick", "-3"], "--hakeeper-election-tick"),
    (["hakeeper", "serve", *PEERS, "--dir", "{d}/h", "--hakeeper-ticks-per-second", "0"],
     "--hakeeper-ticks-per-second"),
    (["hakeeper", "status", "127.0.0.1:1", "--timeout", "-1"], "--timeout"),
    (["hakeeper", "schedule", "127.0.0.1:1", "STOP_TN", "tn-1", "--timeout", "0"], "--timeout"),
    # logtail
    (["logtail", "tn", "{d}/tn", "--load", "-5"], "--load"),
    (["logtail", "tn", "{d}/tn", "--flush-every", "-1"], "--flush-every"),
    (["logtail", "tn", "{d}/tn", "--checkpoint-every", "0"], "--checkpoint-every"),
    (["logtail", "cn", "--tn", "127.0.0.1:1", "--objects", "{d}/o", "--table", "t", "--seconds", "-1"], "--seconds"),
    # demo stages
    (["demo", "--dir", "{d}/demo", "--only", "bogus"], "unknown stage 'bogus' (one of bloom, "),
    (["demo", "--dir", "{d}/demo", "--only", "bloom", "--only", ""], "unknown stage ''"),
    # raft sim: its own usage errors name `logtide raft sim`
    (["raft", "sim", "--seeds", "5:2"], "--seeds"),
    (["raft", "sim", "--seeds", "3:3"], "--seeds"),
    (["raft", "sim", "--seeds", "a:b"], "--seeds"),
    (["raft", "sim", "--seed", "1", "--jobs", "0"], "--jobs"),
    (["raft", "sim", "--seed", "1", "--jobs", "-2"], "--jobs"),
    (["raft", "sim", "--soak", "-1"], "--soak"),
    (["raft", "sim", "--seed", "1", "--fault-ticks", "-5"], "--fault-ticks"),
    # cluster: a missing cluster, and arguments checked before anything is made
    (["cluster", "down", "--dir", "{d}/missing"], "holds no cluster"),
    (["cluster", "down", "--dir", "{d}"], "holds no cluster"),
    (["cluster", "start", "--dir", "{d}/missing", "tn#1"], "holds no cluster"),
    (["cluster", "start", "--dir", "{d}", "tn#1"], "holds no cluster"),
    (["cluster", "up", "--dir", "{d}/c", "--log-replicas", "0"], "--log-replicas"),
    (["cluster", "up", "--dir", "{d}", "--log-replicas", "0"], "at least 1"),
    (["cluster", "up", "--dir", "{d}", "--cns", "-1"], "--cns"),
    (["cluster", "up", "--dir", "{d}", "--tick", "0"], "--tick"),
    (["cluster", "up", "--dir", "{d}", "--tick", "5e-4"], "--tick"),
    # a one-line error of a subcommand's own goes to stderr
    (["meta", "serve", "--memory", "--raft"], "--raft keeps its own log"),
    (["meta", "serve", "--dir", "{d}/m", "--snapshot-every", "-1"], "snapshot_every"),
    (["replay", "ro", "--dir", "{d}/r", "--primary", "127.0.0.1:1"], "could not connect to 127.0.0.1:1"),
]


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(logtide_cmd() + argv, capture_output=True, text=True, timeout=timeout, cwd="/")


def _error_line(p: subprocess.CompletedProcess) -> str:
    """The one line of stderr that is not argparse's usage (which starts with `usage:` and goes on
    indented)."""
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("argv, says", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused(tmp_path, argv, says):
    (tmp_path / "kept").write_text("x")     # a directory that holds something, to see it unchanged
    before = _snapshot(tmp_path)
    p = _run([a.replace("{d}", str(tmp_path)) for a in argv])
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    line = _error_line(p)
    assert says in line, p.stderr
    assert p.stdout == "", p.stdout        # no server or stage started: nothing printed its first line
    if argv[:2] == ["raft", "sim"]:
        assert line.startswith("logtide raft sim: error:") and "python -m" not in p.stderr
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("argv", [["--seeds", "0:2"], ["--seed", "3", "--jobs", "1", "--fault-ticks", "150"]])
def test_raft_sim_still_runs(argv):
    p = _run(["raft", "sim", *argv])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 failed" in p.stdout or "ok," in p.stdout, p.stdout


def test_logservice_max_message_size_is_refused_before_serving(tmp_path):
    """Refused at the argument, before the log directory is created or a server started."""
    p = _run(["logservice", "serve", "--dir", str(tmp_path / "l"), "--max-message-size", "10"])
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert "--max-message-size" in _error_line(p) and "serving" not in p.stdout
    assert not (tmp_path / "l").exists()
    from logtide.engine.logservice.rpc_service import LogServiceServer
    from logtide.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="max_message_size"):
        LogServiceServer.open(tmp_path / "l2", max_message_size=10)
    assert not (tmp_path / "l2").exists()


def test_logtail_cn_seconds_bounds_the_wait_for_the_tn(tmp_path):
    t0 = time.monotonic()
    p = _run(["logtail", "cn", "--tn", "127.0.0.1:1", "--objects", str(tmp_path / "o"), "--table", "t",
              "--seconds", "1.5"], timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert "no stream to the TN in 1.5 s" in p.stderr.splitlines()[-1], p.stderr
    assert took < 10, took      # was 30 s, whatever --seconds said


@pytest.mark.parametrize("text", ["-5", "-1", str(1 << 64), "99999999999999999999999", "-0x5", "1/-2", "-1/5",
                                  "1/100000000", "100000000/0", "0/ZZ", "", "x"])
def test_parse_lsn_refuses(text):
    from logtide.logindex.pgwal import parse_lsn
    with pytest.raises(ValueError):
        parse_lsn(text)


@pytest.mark.parametrize("text, want", [("0", 0), ("5", 5), (str((1 << 64) - 1), (1 << 64) - 1), ("0x10", 16),
                                        ("0/2001108", 0x2001108), ("FFFFFFFF/FFFFFFFF", (1 << 64) - 1),
                                        (" 1/0 ", 1 << 32)])
def test_parse_lsn_takes_u64(text, want):
    from logtide.logindex.pgwal import parse_lsn
    assert parse_lsn(text) == want


def test_parse_lsn_error_says_u64():
    from logtide.logindex.pgwal import parse_lsn
    with pytest.raises(ValueError, match=r"an LSN is a u64, got '-5'"):
        parse_lsn("-5")


@pytest.mark.parametrize("size", [-1, 0, 10, 1024, (8 << 10) - 1, True, 8192.0])
def test_log_service_server_refuses_a_tiny_message_limit(tmp_path, size):
    from logtide import LogService
    from logtide.engine.logservice.rpc_service import LogServiceServer
    from logtide.errors import InvalidArgument
    with LogService.open(tmp_path / "l", truncation_interval=0) as svc:
        with pytest.raises(InvalidArgument, match="max_message_size"):
            LogServiceServer(svc, "127.0.0.1:0", max_message_size=size)


def test_log_service_server_smallest_limit_serves(tmp_path):
    """At the smallest limit the ordinary calls (config, readers) still fit; an oversize reply's error
    names the size compared, framing included."""
    from logtide import LogService
    from logtide.engine.logservice import connect_logservice
    from logtide.engine.logservice.rpc_service import LogServiceServer
    from logtide.errors import LogtideError
    with LogService.open(tmp_path / "l", truncation_interval=0) as svc:
        with LogServiceServer(svc, "127.0.0.1:0", max_message_size=8 << 10) as server:
            with connect_logservice(server.address) as c:
                c.register_reader("r", 0)
                assert c.readers() == {"r": 0}
                for k in range(200):   # names enough for a ListReaders reply past the limit
                    c.register_reader(f"reader-{k:03d}-" + "x" * 40, 0)
                with pytest.raises(LogtideError) as err:
                    c.readers()
    msg = str(err.value)
    n = int(msg.split("reply of ")[1].split(" bytes")[0])
    assert n > 8 << 10 and "of framing" in msg and "exceeds the message limit 8192" in msg, msg


def test_arg_types():
    import argparse

    from logtide.arg_types import election_tick, non_negative_float, non_negative_int, positive_float, positive_int
    assert positive_float("0.5") == 0.5 and non_negative_float("0") == 0.0
    assert positive_int("1") == 1 and non_negative_int("0") == 0 and election_tick("2") == 2
    for f, bad in ((positive_float, "0"), (positive_float, "nan"), (positive_float, "inf"), (positive_float, "x"),
                   (non_negative_float, "-0.1"), (non_negative_float, "nan"), (positive_int, "0"),
                   (positive_int, "1.5"), (non_negative_int, "-1"), (election_tick, "1")):
        with pytest.raises(argparse.ArgumentTypeError):
            f(bad)
    assert math.isfinite(positive_float("1e300"))
