"""The log service's call pipeline on an asyncio gRPC server (grpc.aio), for the sync-vs-asyncio
comparison in bench_logservice_grpc.py (docs/rpc.md). Run as a script:

    python bench/aio_pipeline_server.py DIR FSYNC

prints "serving DIR on 127.0.0.1:PORT" and serves until SIGTERM. Only the pipeline is served:
enough for appends and the other unary calls of a pipelined client.
"""
import asyncio
import signal
import sys

import grpc

from logtide.engine.logservice.grpc_service import LOGSERVICE, LogServiceServicer
from logtide.engine.logservice.service import LogService
from logtide.engine.rpc.pipeline_aio import aio_handler
from logtide.engine.rpc.pipeline_server import PIPELINE_PATH, PipelineDispatcher

MAX_MESSAGE = 64 << 20


class _Router(grpc.GenericRpcHandler):
    def __init__(self, handler) -> None:
        self._handler = handler

    def service(self, details):
        return self._handler if details.method == PIPELINE_PATH else None


async def main(path: str, fsync: str) -> None:
    svc = LogService.open(path, fsync=fsync)
    dispatcher = PipelineDispatcher(MAX_MESSAGE)
    servicer = LogServiceServicer(svc, MAX_MESSAGE)
    for m in LOGSERVICE.methods.values():
        dispatcher.add(m, getattr(servicer, m.name), servicer)
    server = grpc.aio.server(handlers=[_Router(aio_handler(dispatcher))], options=[
        ("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"serving {path} on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)
    dispatcher.close()
    svc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
