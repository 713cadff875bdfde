"""The framed carrier's echo server, for bench_wire_floor.py: the Diagnostics service (its unary
Ping answers each request with its payload) on a WireServer, in a process of its own. Run as

    python bench/wire_echo_server.py

prints "serving on 127.0.0.1:PORT" and serves until SIGTERM.
"""
import signal
import threading


def main() -> None:
    from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
    from logtide.engine.rpc.wire_server import WireServer
    server = WireServer("127.0.0.1:0")
    server.add_service(DIAGNOSTICS, DiagnosticsServicer("echo"))
    server.start()
    print(f"serving on {server.address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


if __name__ == "__main__":
    main()
