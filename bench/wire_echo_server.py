"""The framed carrier's echo server, for bench_wire_floor.py: a bare echo (no protobuf work, like
bench/grpc_echo_server.py, its gRPC baseline) on a WireServer, in a process of its own. It serves
the Diagnostics service; its Ping answers each call with the call's request bytes, which parse as
the PingReply carrying the same payload (both messages hold it in field 1), and runs on the
server's loop (a nonblocking method). Run as

    python bench/wire_echo_server.py

prints "serving on 127.0.0.1:PORT" and serves until SIGTERM.
"""
import signal
import threading


def main() -> None:
    from logtide._ext.frame_codec import pack_replies
    from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
    from logtide.engine.rpc.wire_server import WireServer

    class BareEcho(DiagnosticsServicer):
        def frames_Ping(self, ids: list, requests: list, ctx) -> tuple[bytes, list]:
            """The server's batch of Ping calls as raw bytes: each answered by its own bytes."""
            return pack_replies(ids, requests), []

    server = WireServer("127.0.0.1:0")
    server.add_service(DIAGNOSTICS, BareEcho("echo"))
    server.start()
    print(f"serving on {server.address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


if __name__ == "__main__":
    main()
