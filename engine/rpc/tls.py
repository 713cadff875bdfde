"""TlsConfig: optional mutual TLS for both carriers, from a CA, a certificate and a key (PEM files).

Both sides present a certificate and accept only a peer whose certificate the CA signed; a
client also checks that the server's certificate names the host it dialled. A process's servers
and clients use the TlsConfig given to them, else the process default: `set_default()` (the
`logtide --tls-ca/--tls-cert/--tls-key` options) or the LOGTIDE_TLS_CA, LOGTIDE_TLS_CERT and
LOGTIDE_TLS_KEY environment variables, which child processes inherit. Without any, plaintext
(the default, on loopback). With `peer_ids` (`--tls-peer-ids`, LOGTIDE_TLS_PEER_IDS=1) a server
also hands each call the URI names of its peer's certificate, for a service that binds what a
peer claims to be to what its certificate names (Raft's peers: docs/raft.md, section 5). See
docs/rpc.md, "Who may connect".
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Optional, Union

from logtide.errors import InvalidArgument

ENV = ("LOGTIDE_TLS_CA", "LOGTIDE_TLS_CERT", "LOGTIDE_TLS_KEY")
PEER_IDS_ENV = "LOGTIDE_TLS_PEER_IDS"
ALPN_WIRE = "ltwire"      # the framed carrier's ALPN name; gRPC's is "h2"


@dataclass(frozen=True)
class TlsConfig:
    """Paths of the CA (verifies peers), this side's certificate and its private key; peer_ids: a
    server gives each call its peer certificate's URI names (CallContext.peer_uris)."""
    ca: str
    cert: str
    key: str
    peer_ids: bool = False

    def __post_init__(self) -> None:
        for what, path in (("CA", self.ca), ("certificate", self.cert), ("key", self.key)):
            if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
                raise InvalidArgument(f"TLS {what} file {path!r} does not exist")

    def _read(self) -> tuple[bytes, bytes, bytes]:
        out = []
        for path in (self.ca, self.cert, self.key):
            with open(path, "rb") as f:
                out.append(f.read())
        return out[0], out[1], out[2]

    def server_context(self, alpn: tuple[str, ...] = (ALPN_WIRE, "h2")) -> ssl.SSLContext:
        """A server context that requires a client certificate signed by the CA."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(list(alpn))
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """A client context that presents this side's certificate and checks the server's."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(ctx)
        ctx.set_alpn_protocols([ALPN_WIRE])
        return ctx

    def _load(self, ctx: ssl.SSLContext) -> None:
        try:
            ctx.load_verify_locations(cafile=os.fspath(self.ca))
            ctx.load_cert_chain(os.fspath(self.cert), os.fspath(self.key))
        except (ssl.SSLError, OSError) as exc:
            raise InvalidArgument(f"TLS files ({self.ca}, {self.cert}, {self.key}) do not load: {exc}") from None

    def grpc_server_credentials(self):
        import grpc
        ca, cert, key = self._read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def grpc_channel_credentials(self):
        import grpc
        ca, cert, key = self._read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class _Plaintext:
    """`tls=PLAINTEXT`: no TLS whatever the process default (a DualServer's inner gRPC server)."""

    def __repr__(self) -> str:
        return "PLAINTEXT"


PLAINTEXT = _Plaintext()
TlsOption = Union[TlsConfig, _Plaintext, None]
_default: Optional[TlsConfig] = None


def set_default(cfg: Optional[TlsConfig]) -> None:
    """Make `cfg` the TLS of every server and client of this process not given one (None: plaintext),
    and of its child processes (through the environment)."""
    global _default
    _default = cfg
    for name, value in zip(ENV, (cfg.ca, cfg.cert, cfg.key) if cfg else (None, None, None)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = os.path.abspath(os.fspath(value))
    if cfg is not None and cfg.peer_ids:
        os.environ[PEER_IDS_ENV] = "1"
    else:
        os.environ.pop(PEER_IDS_ENV, None)


def resolve(tls: TlsOption) -> Optional[TlsConfig]:
    """The TlsConfig to use for an option: itself, None for PLAINTEXT, else the process default."""
    if isinstance(tls, TlsConfig):
        return tls
    if tls is PLAINTEXT:
        return None
    if tls is not None:
        raise InvalidArgument(f"tls must be a TlsConfig, PLAINTEXT or None, got {type(tls).__name__}")
    if _default is not None:
        return _default
    paths = [os.environ.get(n) for n in ENV]
    if not any(paths):
        return None
    if not all(paths):
        raise InvalidArgument(f"set all of {', '.join(ENV)} or none of them")
    return TlsConfig(*paths, peer_ids=os.environ.get(PEER_IDS_ENV) == "1")


def certificate_uris(cert: Optional[dict]) -> frozenset[str]:
    """The URI names (subjectAltName) of a certificate as ssl's getpeercert() gives it."""
    if not cert:
        return frozenset()
    return frozenset(value for kind, value in cert.get("subjectAltName", ()) if kind == "URI")


def grpc_channel(address: str, options: list, cfg: Optional[TlsConfig], aio: bool = False):
    """A gRPC channel to `address`: secure with `cfg`'s credentials, else plaintext."""
    import grpc
    mod = grpc.aio if aio else grpc
    if cfg is None:
        return mod.insecure_channel(address, options=options)
    return mod.secure_channel(address, cfg.grpc_channel_credentials(), options=options)
