"""TcpProxy: a loopback TCP proxy a test puts between a client and a server to cut traffic.

`blackhole(True)` stops moving bytes in both directions on every connection, old and new (new ones
are accepted and held): both ends see a silent peer, as in a network partition where TCP keeps
retransmitting. `blackhole(False)` heals it: held bytes flow again. `retarget(addr)` sends new
connections to another server (a restarted one on a new port). `mute_replies(True)` still
delivers the client's bytes but holds the server's: a request lands, its answer never comes.
"""
from __future__ import annotations

import select
import socket
import threading


class TcpProxy:
    def __init__(self, target: str) -> None:
        self._target = target
        self._open = threading.Event()      # set = traffic flows (not blackholed)
        self._open.set()
        self._replies = threading.Event()   # set = server-to-client bytes flow
        self._replies.set()
        self._closed = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True).start()

    def retarget(self, target: str) -> None:
        self._target = target

    def blackhole(self, on: bool) -> None:
        if on:
            self._open.clear()
        else:
            self._open.set()

    def mute_replies(self, on: bool) -> None:
        if on:
            self._replies.clear()
        else:
            self._replies.set()

    def reset(self) -> None:
        """Close every connection through the proxy (the listener stays)."""
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def close(self) -> None:
        self._closed = True
        self._open.set()
        self._replies.set()
        _close(self._listener)
        self.reset()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), name="tcp-proxy-conn", daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._open.wait()                      # a blackholed connection is accepted and held
        host, port = self._target.rsplit(":", 1)
        try:
            server = socket.create_connection((host, int(port)), timeout=2)
            server.settimeout(None)
        except OSError:
            _close(client)                     # as a refused connection would look
            return
        with self._lock:
            if self._closed:
                _close(client), _close(server)
                return
            self._socks += [client, server]
        for a, b, gate in ((client, server, self._open), (server, client, self._replies)):
            threading.Thread(target=self._pump, args=(a, b, gate), name="tcp-proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, gate: threading.Event) -> None:
        try:
            while True:
                self._open.wait()              # blackholed: read nothing, so nothing is delivered
                gate.wait()
                # wait for data without a socket timeout: the other direction's sendall on this same
                # socket must block (not fail) while a stopped peer reads nothing
                if not select.select([src], [], [], 0.1)[0]:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                self._open.wait()
                gate.wait()                    # bytes read before a mute are held too
                dst.sendall(data)
        except (OSError, ValueError):   # closed by the other direction or by reset()
            pass
        finally:
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
