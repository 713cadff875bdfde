"""Mutual TLS on both carriers (engine/rpc/tls.py), on real loopback sockets with certificates
made by openssl: a client the CA signed is served on the framed carrier and on gRPC through one
port; a client whose certificate another CA signed, a client that does not trust the server's CA
and a plaintext client are refused with typed errors, and the server keeps serving; the
`logtide --tls-*` options and the LOGTIDE_TLS_* variables reach a server process and its clients."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from logtide.engine.logservice import connect_logservice
from logtide.engine.rpc import connect
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.dual_server import DualServer
from logtide.engine.rpc.tls import PLAINTEXT, TlsConfig, resolve, set_default
from logtide.errors import DeadlineExceededError, InvalidArgument, RpcError, TlsError

from tls_certs import make_pki

pytestmark = pytest.mark.timeout(120)
LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture()
def served(pki):
    s = DualServer("127.0.0.1:0", tls=pki["node"])
    s.add_service(DIAGNOSTICS, DiagnosticsServicer("tls"))
    s.start()
    yield s
    s.stop(0)


def _works(address: str, tls: TlsConfig) -> None:
    with connect(DIAGNOSTICS, address, carrier="wire", tls=tls, timeout=10) as w, \
            connect(DIAGNOSTICS, address, carrier="grpc", tls=tls, timeout=10) as g:
        assert w.Ping(payload=b"wire").payload == b"wire"
        assert g.Ping(payload=b"grpc").payload == b"grpc"
        assert [m.i for m in w.Count(n=50)] == list(range(50))
        assert [m.i for m in g.Count(n=50)] == list(range(50))


def test_a_client_the_ca_signed_is_served_on_both_carriers(served, pki):
    _works(served.address, pki["client"])
    _works(f"localhost:{served.port}", pki["client"])     # the certificate names both


@pytest.mark.parametrize("who", ["rogue", "wary"])
def test_a_certificate_the_ca_did_not_sign_is_refused(served, pki, who):
    with pytest.raises(TlsError):
        connect(DIAGNOSTICS, served.address, carrier="wire", tls=pki[who], timeout=5, connect_timeout=5)
    with pytest.raises(RpcError):     # gRPC's channel never becomes ready: its typed error
        with connect(DIAGNOSTICS, served.address, carrier="grpc", tls=pki[who], timeout=3,
                     connect_timeout=3) as g:
            g.Ping(payload=b"x")
    _works(served.address, pki["client"])                 # the server keeps serving


def test_a_plaintext_client_is_refused(served, pki):
    with pytest.raises(RpcError):
        connect(DIAGNOSTICS, served.address, carrier="wire", tls=PLAINTEXT, timeout=5, connect_timeout=5)
    with pytest.raises((RpcError, DeadlineExceededError)):
        with connect(DIAGNOSTICS, served.address, carrier="grpc", tls=PLAINTEXT, timeout=3, connect_timeout=3) as g:
            g.Ping(payload=b"x")
    _works(served.address, pki["client"])


def test_a_tls_client_of_a_plaintext_server_gets_a_typed_error(pki):
    s = DualServer("127.0.0.1:0", tls=PLAINTEXT)
    s.add_service(DIAGNOSTICS, DiagnosticsServicer("plain"))
    s.start()
    try:
        with pytest.raises(TlsError):
            connect(DIAGNOSTICS, s.address, carrier="wire", tls=pki["client"], timeout=5, connect_timeout=5)
    finally:
        s.stop(0)


def test_bad_tls_options_are_typed(tmp_path, pki):
    with pytest.raises(InvalidArgument, match="does not exist"):
        TlsConfig(str(tmp_path / "none.pem"), pki["node"].cert, pki["node"].key)
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk = TlsConfig(str(tmp_path / "junk.pem"), pki["node"].cert, pki["node"].key)
    with pytest.raises(InvalidArgument, match="do not load"):
        junk.client_context()
    with pytest.raises(InvalidArgument):
        resolve("yes please")


def test_the_process_default_and_the_cli_options(tmp_path, pki):
    """`logtide --tls-* logservice serve` serves with TLS; a client process given the same
    options through LOGTIDE_TLS_* connects, and one without them is refused."""
    node = pki["node"]
    proc = subprocess.Popen([LOGTIDE, "--tls-ca", node.ca, "--tls-cert", node.cert,
                             "--tls-key", node.key, "logservice", "serve", "--dir", str(tmp_path / "log"),
                             "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        line = proc.stdout.readline()          # "logservice: serving DIR on HOST:PORT (...)"
        m = re.search(r" on (127\.0\.0\.1:\d+)", line)
        assert m, line + (proc.stdout.read() if proc.poll() is not None else "")
        addr = m.group(1)
        set_default(pki["client"])
        try:
            assert os.environ["LOGTIDE_TLS_CERT"] == os.path.abspath(pki["client"].cert)
            with connect_logservice(addr, timeout=10) as c:
                lsn = c.append(b"over tls")
                recs, _ = c.read(lsn, 1 << 20)
                assert [r.data[-8:] for r in recs] == [b"over tls"]     # after the client's update header
        finally:
            set_default(None)
        assert "LOGTIDE_TLS_CA" not in os.environ
        with pytest.raises(RpcError):
            connect_logservice(addr, timeout=5)
        out = subprocess.run([LOGTIDE, "--tls-ca", node.ca, "logservice", "serve", "--dir", str(tmp_path / "x")],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 2 and "go together" in out.stderr
    finally:
        proc.terminate()
        proc.wait(30)


def test_peer_ids_reach_child_processes_and_name_a_peers_certificate(tmp_path):
    """TlsConfig.peer_ids travels through LOGTIDE_TLS_PEER_IDS as the paths do; a server with it
    hands each call its peer certificate's URI names (a certificate without any gives none), one
    without it hands None (nothing to check); `--tls-peer-ids` alone is a typed CLI error."""
    from logtide.engine.rpc.diagnostics import DiagnosticsServicer as Base
    from tls_certs import make_raft_pki
    pki = make_raft_pki(tmp_path / "pki", (7,))
    set_default(pki["raft7"])
    try:
        assert os.environ["LOGTIDE_TLS_PEER_IDS"] == "1"
        set_default(None)   # resolve() reads the environment only without a process default
        os.environ.update(LOGTIDE_TLS_CA=pki["raft7"].ca, LOGTIDE_TLS_CERT=pki["raft7"].cert,
                          LOGTIDE_TLS_KEY=pki["raft7"].key, LOGTIDE_TLS_PEER_IDS="1")
        assert resolve(None) == pki["raft7"]
    finally:
        set_default(None)
    assert "LOGTIDE_TLS_PEER_IDS" not in os.environ

    seen = []

    class Names(Base):
        def Ping(self, req, ctx):
            seen.append(ctx.peer_uris)
            return super().Ping(req, ctx)

    for server_tls, want in ((pki["raft7"], [frozenset({"logtide:raft:7"}), frozenset()]),
                             (TlsConfig(pki["raft7"].ca, pki["raft7"].cert, pki["raft7"].key), [None, None])):
        s = DualServer("127.0.0.1:0", tls=server_tls)
        s.add_service(DIAGNOSTICS, Names("names"))
        s.start()
        try:
            seen.clear()
            for client in ("raft7", "client"):
                with connect(DIAGNOSTICS, s.address, carrier="wire", tls=pki[client], timeout=10) as w:
                    assert w.Ping(payload=b"x").payload == b"x"
            assert seen == want
        finally:
            s.stop(0)
    out = subprocess.run([LOGTIDE, "--tls-peer-ids", "logservice", "serve", "--dir", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "--tls-peer-ids needs them" in out.stderr, out.stderr
    c = pki["raft7"]
    out = subprocess.run([LOGTIDE, "--tls-ca", c.ca, "--tls-cert", c.cert, "--tls-key", c.key, "--tls-peer-ids",
                          "cluster", "up", "--dir", str(tmp_path / "cluster")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "drop --tls-peer-ids" in out.stderr, out.stderr
    assert not (tmp_path / "cluster" / "cluster.json").exists()
