"""Addresses and directories the commands are given: a bad one is one line on stderr and exit 2,
with nothing created or changed (ports past 65535 once wrapped to another port; a file given as a
directory was a traceback; `info` created a log where there was none; --raft served an empty log
beside a single-node log's records)."""
from __future__ import annotations

import subprocess

import pytest
from logtide_cli import logtide_cmd
from ports import free_ports

pytestmark = pytest.mark.timeout(120)


def _refused(args: list[str], cwd, *words: str) -> str:
    r = subprocess.run(logtide_cmd() + args, capture_output=True, text=True, timeout=60, cwd=str(cwd))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logtide: error:"), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def _tree(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:٥", "nohost"])
def test_a_listen_address_out_of_range_is_refused(tmp_path, listen):
    _refused(["logservice", "serve", "--dir", str(tmp_path / "log"), "--listen", listen], tmp_path, listen)


@pytest.mark.parametrize("peers", ["1=127.0.0.1:0,2=127.0.0.1:7002,3=127.0.0.1:7003",
                                   "1=127.0.0.1:7001,2=127.0.0.1:99999,3=127.0.0.1:7003",
                                   "1=127.0.0.1:7001,1=127.0.0.1:7002,3=127.0.0.1:7003"])
def test_peers_with_an_unreachable_port_or_a_repeated_id_are_refused(tmp_path, peers):
    _refused(["logservice", "serve", "--raft", "--id", "1", "--peers", peers, "--dir", str(tmp_path / "r1")],
             tmp_path, "peer")
    assert not (tmp_path / "r1").exists()


def test_a_client_address_out_of_range_is_refused():
    from logtide import connect_logservice
    from logtide.errors import InvalidArgument
    for address in ("127.0.0.1:104607", "127.0.0.1:0"):
        with pytest.raises(InvalidArgument, match="port"):
            connect_logservice(address)


def test_a_file_given_as_a_directory_is_one_line(tmp_path):
    f = tmp_path / "f"
    f.write_text("hi")
    _refused(["logservice", "info", "--dir", str(f)], tmp_path, str(f))
    _refused(["logservice", "serve", "--dir", str(f), "--listen", "127.0.0.1:0"], tmp_path, str(f))
    _refused(["logservice", "serve", "--dir", str(f / "log"), "--listen", "127.0.0.1:0"], tmp_path, "Not a directory")
    assert f.read_text() == "hi"


def test_info_never_creates_a_log_and_knows_a_foreign_directory(tmp_path):
    from logtide import LogIndex, LogService
    _refused(["logservice", "info", "--dir", str(tmp_path / "missing")], tmp_path, "holds no log service")
    assert not (tmp_path / "missing").exists()
    li = LogIndex.open(tmp_path / "idx")
    li.insert((1, 2, 3, 0, 4), 5)
    li.flush(include_active=True)
    li.close()
    before = _tree(tmp_path / "idx")
    _refused(["logservice", "info", "--dir", str(tmp_path / "idx")], tmp_path, "holds no log service")
    assert _tree(tmp_path / "idx") == before
    with LogService.open(tmp_path / "log") as svc:
        svc.append_many([b"r%d" % i for i in range(40)])
    before = _tree(tmp_path / "log")
    _refused(["logservice", "serve", "--raft", "--id", "1", "--peers", "1=127.0.0.1:7001", "--dir",
              str(tmp_path / "log")], tmp_path, "single-node log")
    assert _tree(tmp_path / "log") == before
    r = subprocess.run(logtide_cmd() + ["logservice", "info", "--dir", str(tmp_path / "log")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "latest LSN:     40" in r.stdout, r.stdout + r.stderr


def test_a_replica_directory_is_not_served_or_read_as_a_single_node_log(tmp_path):
    from logtide.engine.logservice.replicated import ReplicatedLogService
    port = free_ports(1)[0]
    svc = ReplicatedLogService.open(tmp_path / "r1", 1, {1: f"127.0.0.1:{port}"}, f"127.0.0.1:{port}")
    svc.close()
    before = _tree(tmp_path / "r1")
    _refused(["logservice", "info", "--dir", str(tmp_path / "r1")], tmp_path, "replica")
    _refused(["logservice", "serve", "--dir", str(tmp_path / "r1"), "--listen", "127.0.0.1:0"], tmp_path, "replica")
    assert _tree(tmp_path / "r1") == before


def test_logindex_query_of_a_directory_without_an_index_is_refused(tmp_path):
    """It printed '0 pages changed' for a log service's directory, or for any directory."""
    from logtide import LogService
    with LogService.open(tmp_path / "log") as svc:
        svc.append(b"x")
    before = _tree(tmp_path)
    for d in (tmp_path / "log", tmp_path):
        _refused(["logindex", "query", "--dir", str(d), "--from", "0/0"], tmp_path, "holds no LogIndex")
    assert _tree(tmp_path) == before


def test_serve_raft_does_not_ignore_a_message_limit_it_cannot_apply(tmp_path):
    _refused(["logservice", "serve", "--raft", "--id", "1", "--peers", "1=127.0.0.1:7001", "--dir",
              str(tmp_path / "r1"), "--max-message-size", "65536"], tmp_path, "--max-message-size")
    assert not (tmp_path / "r1").exists()
