"""Lockstep echo clients in a process of their own, for bench_wire_floor.py. Run as

    python bench/echo_clients.py wire|grpc|bare ADDRESS CONNECTIONS PAYLOAD_BYTES

It opens CONNECTIONS connections (one thread each), prints "ready", then for each line "run N" on
stdin makes N round trips on every connection, each waiting for its reply (lockstep), and prints
"done CPU_SECONDS" (this process's CPU time of the round). "quit" ends it.
"""
import queue
import sys
import threading
import time


def wire_caller(address: str, payload: bytes):
    from logtide.engine.rpc import RpcClient
    from logtide.engine.rpc.diagnostics import DIAGNOSTICS
    from logtide.engine.rpc.wire_client import WireTransport
    c = RpcClient(DIAGNOSTICS, WireTransport(address, timeout=60))
    ping = c.Ping

    def trips(n: int) -> None:
        for _ in range(n):
            if len(ping(payload=payload).payload) != len(payload):
                raise AssertionError("wrong echo")
    return trips


def grpc_caller(address: str, payload: bytes):
    import grpc
    from bench.grpc_echo_server import ECHO_PATH
    ch = grpc.insecure_channel(address)
    q: queue.SimpleQueue = queue.SimpleQueue()
    replies = ch.stream_stream(ECHO_PATH)(iter(q.get, None))

    def trips(n: int) -> None:
        for _ in range(n):
            q.put(payload)
            if len(next(replies)) != len(payload):
                raise AssertionError("wrong echo")
    return trips


def bare_caller(address: str, payload: bytes):
    """A blocking socket speaking bench/bare_echo_server.py's frames: [u32 length][payload]."""
    import socket
    import struct
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = struct.pack("<I", len(payload)) + payload

    def trips(n: int) -> None:
        for _ in range(n):
            s.sendall(frame)
            got = 0
            while got < len(frame):
                chunk = s.recv(65536)
                if not chunk:
                    raise AssertionError("the echo server closed the connection")
                got += len(chunk)
    return trips


def main(carrier: str, address: str, conns: int, size: int) -> None:
    payload = b"\xa5" * size
    make = {"wire": wire_caller, "grpc": grpc_caller, "bare": bare_caller}[carrier]
    callers = [make(address, payload) for _ in range(conns)]
    for c in callers:
        c(5)                                  # connected and warm before any timed round
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            return
        n = int(cmd[1])
        errors = []

        def run(c):
            try:
                c(n)
            except BaseException as exc:  # noqa: B902 - reported
                errors.append(exc)
        c0 = time.process_time()
        ths = [threading.Thread(target=run, args=(c,)) for c in callers]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        if errors:
            print(f"error {type(errors[0]).__name__}: {errors[0]}", flush=True)
            return
        print(f"done {time.process_time() - c0:.6f}", flush=True)


if __name__ == "__main__":
    import os
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import bench  # noqa: F401,E402 - for bench.grpc_echo_server; it takes the source tree off sys.path again
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
