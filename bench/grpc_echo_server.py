"""A bare gRPC bidirectional stream with no logtide code behind it: the floor under the log service's
call pipeline (bench_logservice_grpc.py, test_grpc_stream_floor). Run as a script:

    python bench/grpc_echo_server.py REPLY_BYTES [DURABLE_FILE]

prints "serving on 127.0.0.1:PORT" and answers every message of /floor.Echo/Calls with REPLY_BYTES
bytes, on the synchronous grpc.server that RpcServer runs, until SIGTERM. With DURABLE_FILE, each
message is first written there and fdatasync'd, as a group commit of its calls would be (the file
is filled with zeros ahead, as the log's segments are, and written round and round).
"""
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

ECHO_PATH = "/floor.Echo/Calls"
FILE_BYTES = 32 << 20     # the durable file's size (written round and round)


def main(reply_bytes: int, durable_file: str | None) -> None:
    reply = b"\x5a" * reply_bytes
    fd = -1
    if durable_file:
        fd = os.open(durable_file, os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, bytes(FILE_BYTES))
        os.fsync(fd)
    at = [0]

    def calls(messages, context):
        for m in messages:
            if fd >= 0:
                if at[0] + len(m) > FILE_BYTES:
                    at[0] = 0
                os.pwrite(fd, m, at[0])
                at[0] += len(m)
                os.fdatasync(fd)
            yield reply

    handler = grpc.method_handlers_generic_handler(
        "floor.Echo", {"Calls": grpc.stream_stream_rpc_method_handler(calls)})
    # one worker per open stream (the floor benchmarks open up to 32), as RpcServer has room for
    server = grpc.server(ThreadPoolExecutor(max_workers=64))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"serving on 127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
