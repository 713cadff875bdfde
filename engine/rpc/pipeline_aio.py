"""The call pipeline on an asyncio gRPC server (grpc.aio): one event loop reads CallBatch messages,
runs each batch on the dispatcher's pool, and writes the replies, without a thread per stream."""
from __future__ import annotations

import asyncio

import grpc
from google.protobuf.message import DecodeError

from logtide.engine.rpc import pipeline_pb2 as pb
from logtide.engine.rpc.error_mapping import ERROR_TYPE_KEY, status_code, type_name
from logtide.engine.rpc.call_frames import MalformedFrames
from logtide.engine.rpc.pipeline_server import PIPELINE_PATH, PipelineDispatcher, Replies, reply_lists
from logtide.engine.rpc.service import CallContext
from logtide.errors import InvalidRequest

_END = object()


class _AioContext:
    """What a servicer sees of a pipelined call on the asyncio server."""

    def __init__(self, context) -> None:
        self._context = context

    def is_active(self) -> bool:
        return not self._context.done()


def aio_handler(dispatcher: PipelineDispatcher) -> grpc.RpcMethodHandler:
    """The raw-bytes bidi handler of PIPELINE_PATH for grpc.aio.server."""

    async def serve(request_iterator, context):
        loop = asyncio.get_running_loop()
        ctx = CallContext(context.peer(), dict(context.invocation_metadata() or ()), _AioContext(context))
        out: asyncio.Queue = asyncio.Queue()
        running: set = set()

        async def job(batch):
            try:
                out.put_nowait(await loop.run_in_executor(dispatcher.pool, dispatcher.run, batch, ctx))
            except MalformedFrames as exc:
                out.put_nowait(InvalidRequest(f"{PIPELINE_PATH}: malformed CallBatch: {exc}"))
            finally:
                running.discard(asyncio.current_task())
                if not running and reading_done[0]:
                    out.put_nowait(_END)

        reading_done = [False]

        async def reader():
            try:
                async for raw in request_iterator:
                    try:
                        batch = pb.CallBatch.FromString(raw)
                    except (DecodeError, ValueError) as exc:
                        out.put_nowait(InvalidRequest(f"{PIPELINE_PATH}: malformed CallBatch: {exc}"))
                        return
                    t = loop.create_task(job(batch))
                    running.add(t)
            except Exception:  # noqa: BLE001 - the client went away: end the stream
                pass
            finally:
                reading_done[0] = True
                if not running:
                    out.put_nowait(_END)

        read_task = loop.create_task(reader())
        try:
            while True:
                item = await out.get()
                if item is _END:
                    return
                if isinstance(item, InvalidRequest):
                    context.set_trailing_metadata(((ERROR_TYPE_KEY, type_name(type(item))),))
                    await context.abort(status_code(item), str(item))
                lists = [item]
                while not out.empty():
                    more = out.get_nowait()
                    if more.__class__ is not Replies:
                        out.put_nowait(more)
                        break
                    lists.append(more)
                for msg in reply_lists(lists):
                    await context.write(msg)
        finally:
            read_task.cancel()

    return grpc.stream_stream_rpc_method_handler(serve)
