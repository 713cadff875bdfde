"""The `logtide` command. Each module in logtide.commands adds one subcommand group."""
from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import logtide.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logtide", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"logtide {_version()}")
    tls = parser.add_argument_group("mutual TLS (both carriers, every server and client of the command; "
                                    "also LOGTIDE_TLS_CA/CERT/KEY)")
    tls.add_argument("--tls-ca", metavar="PEM", help="CA that signed every peer's certificate")
    tls.add_argument("--tls-cert", metavar="PEM", help="this process's certificate")
    tls.add_argument("--tls-key", metavar="PEM", help="its private key")
    tls.add_argument("--tls-peer-ids", action="store_true",
                     help="Raft replicas take a peer's messages only when its certificate names the id they "
                          "claim (the URI logtide:raft:ID in its subjectAltName); also LOGTIDE_TLS_PEER_IDS=1")
    parser.add_argument("--cpus", metavar="LIST",
                        help="run this process on these CPUs only, e.g. 0 or 0,2-3 (see logtide.cpu_affinity: a "
                             "wake-up on another CPU costs more than the work it hands over)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(logtide.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"logtide.commands.{info.name}")
        module.register(sub)
    return parser


def _apply_tls(args: argparse.Namespace) -> None:
    given = [args.tls_ca, args.tls_cert, args.tls_key]
    if any(given) or args.tls_peer_ids:
        from logtide.engine.rpc.tls import TlsConfig, set_default
        from logtide.errors import InvalidArgument
        if not all(given):
            raise InvalidArgument("--tls-ca, --tls-cert and --tls-key go together"
                                  + (" (--tls-peer-ids needs them)" if args.tls_peer_ids else ""))
        set_default(TlsConfig(*given, peer_ids=args.tls_peer_ids))


def _log_role_changes() -> None:
    """A replica's Raft role changes go to stderr, one timestamped line each: its log then shows
    when and how it lost or won leadership."""
    role = logging.getLogger("logtide.raft.role")
    if role.handlers:         # main() ran before in this process
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    role.setLevel(logging.INFO)
    role.addHandler(handler)
    role.propagate = False


def _version() -> str:
    import logtide
    return logtide.__version__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _apply_tls(args)
        _log_role_changes()
        if args.cpus is not None:
            from logtide.cpu_affinity import confine_process, parse_cpus
            confine_process(parse_cpus(args.cpus))
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a typed logtide error is a user-facing message, not a traceback
        from logtide.errors import LogtideError
        if isinstance(exc, (LogtideError, FileNotFoundError, ValueError)):
            print(f"logtide: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename is not None:   # a path of the wrong kind, or refused
            print(f"logtide: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
