"""Test certificates made with the openssl command: a CA, leaf certificates it signs (for
127.0.0.1 and localhost, server and client use), and a second, rogue CA with a leaf of its own."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from logtide.engine.rpc.tls import TlsConfig

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
LEAF_EXT = ("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
            "basicConstraints=CA:FALSE\n")


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    d.mkdir(parents=True, exist_ok=True)
    ca, key = d / f"{name}.pem", d / f"{name}.key"
    _run("req", "-x509", *EC, "-keyout", str(key), "-out", str(ca), "-days", "7", "-subj", f"/CN={name}")
    return ca, key


def make_leaf(d: Path, ca: tuple[Path, Path], name: str, uris: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A leaf the CA signs, for 127.0.0.1 and localhost; `uris` are added to its subjectAltName."""
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    _run("req", *EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    ext.write_text(LEAF_EXT.replace("DNS:localhost", "DNS:localhost" + "".join(f",URI:{u}" for u in uris)))
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
         "-out", str(cert), "-days", "7", "-extfile", str(ext))
    os.chmod(key, 0o600)
    return cert, key


def make_pki(d: Path) -> dict[str, TlsConfig]:
    """{"node": a leaf of the CA, "client": another, "rogue": a leaf of another CA that trusts the
    right CA (the server must refuse it), "wary": a leaf of the CA that trusts only the other CA
    (it must refuse the server)}."""
    ca = make_ca(d, "ca")
    rogue_ca = make_ca(d, "rogue-ca")
    out = {}
    for name in ("node", "client"):
        cert, key = make_leaf(d, ca, name)
        out[name] = TlsConfig(str(ca[0]), str(cert), str(key))
    cert, key = make_leaf(d, rogue_ca, "rogue")
    out["rogue"] = TlsConfig(str(ca[0]), str(cert), str(key))
    out["wary"] = TlsConfig(str(rogue_ca[0]), out["client"].cert, out["client"].key)
    return out


def make_raft_pki(d: Path, ids, group: int | None = None, foreign_group: int | None = None) -> dict[str, TlsConfig]:
    """{"raft<i>": a leaf naming Raft node i (URI logtide:raft:<i>, or logtide:raft:<group>:<i> in
    group `group` only), for each i in ids; "foreign<i>": node i of group `foreign_group`, when
    given; "client": a leaf of the same CA naming no node}, all with peer_ids on."""
    ca = make_ca(d, "ca")
    out = {}
    for i in ids:
        uri = f"logtide:raft:{i}" if group is None else f"logtide:raft:{group}:{i}"
        cert, key = make_leaf(d, ca, f"raft{i}", (uri,))
        out[f"raft{i}"] = TlsConfig(str(ca[0]), str(cert), str(key), peer_ids=True)
        if foreign_group is not None:
            cert, key = make_leaf(d, ca, f"foreign{i}", (f"logtide:raft:{foreign_group}:{i}",))
            out[f"foreign{i}"] = TlsConfig(str(ca[0]), str(cert), str(key), peer_ids=True)
    cert, key = make_leaf(d, ca, "client")
    out["client"] = TlsConfig(str(ca[0]), str(cert), str(key), peer_ids=True)
    return out
