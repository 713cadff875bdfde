"""DualServer: one address that serves the framed carrier and gRPC, told apart by the first bytes.

logtide's own clients speak the framed carrier (WireServer); a client in another language speaks
gRPC to the same address, whose connection is carried to a gRPC server of this process listening
on a Unix socket in a directory only this user may enter (GrpcPassthrough). With TLS, the
WireServer ends it for both carriers (one certificate, one port), so the inner gRPC server is
plaintext and unreachable from the network. A service added with grpc=False (Raft's peer traffic,
replica-to-replica forwarding) is served on the framed carrier only.

The socket's directory is named after the process (logtide-grpc-<pid>-...). stop() removes it; a
process killed with SIGKILL cannot, so each new DualServer removes this user's directories whose
process is gone (else every crash leaves one in the temporary directory for good).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import Any

from logtide.engine.rpc.server import RpcServer
from logtide.engine.rpc.service import ServiceDef
from logtide.engine.rpc.tls import PLAINTEXT, TlsOption
from logtide.engine.rpc.transport import DEFAULT_MAX_MESSAGE_SIZE
from logtide.engine.rpc.wire_server import WireServer


SOCKET_DIR_PREFIX = "logtide-grpc-"


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:        # alive, another user's
        return False
    return False


def sweep_stale_socket_dirs(tmp: str | None = None) -> list[str]:
    """Remove this user's socket directories whose process no longer runs; returns their paths."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    uid = os.getuid()
    for name in names:
        if not name.startswith(SOCKET_DIR_PREFIX):
            continue
        pid = name[len(SOCKET_DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not _process_gone(int(pid)):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class DualServer:
    """Both carriers on `address` ("127.0.0.1:0" picks a free port; `start()` returns it)."""

    def __init__(self, address: str = "127.0.0.1:0", *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 workers: int = 8, grpc_workers: int = 16, keepalive: float | None = None,
                 keepalive_timeout: float | None = None, tls: TlsOption = None) -> None:
        self.max_message_size = max_message_size
        self.wire = WireServer(address, max_message_size=max_message_size, workers=workers, keepalive=keepalive,
                               keepalive_timeout=keepalive_timeout, tls=tls)
        sweep_stale_socket_dirs()
        # mode 0700: this user only
        self._dir = tempfile.mkdtemp(prefix=f"{SOCKET_DIR_PREFIX}{os.getpid()}-")
        self._socket = os.path.join(self._dir, "grpc.sock")
        self.grpc = RpcServer(f"unix:{self._socket}", max_message_size=max_message_size, max_workers=grpc_workers,
                              keepalive=keepalive, keepalive_timeout=keepalive_timeout, tls=PLAINTEXT)
        self.port: int | None = None
        self.address: str | None = None

    @property
    def tls(self):
        """The TlsConfig both carriers are served with (None: plaintext)."""
        return self.wire.tls

    def add_service(self, service: ServiceDef, servicer: Any, *, grpc: bool = True) -> "DualServer":
        """Serve `service` on the framed carrier and, unless grpc=False, on gRPC."""
        self.wire.add_service(service, servicer)
        if grpc:
            self.grpc.add_service(service, servicer)
        return self

    def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        self.grpc.start()
        self.wire.grpc_backend = self._socket
        try:
            self.port = self.wire.start()
        except BaseException:
            self.grpc.stop(0)
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.address = self.wire.address
        return self.port

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop both carriers: calls in flight get `grace` seconds."""
        try:
            self.wire.stop(grace)
        finally:
            self.grpc.stop(grace)
            shutil.rmtree(self._dir, ignore_errors=True)

    def wait(self) -> None:
        """Block until stop()."""
        self.grpc.wait()
