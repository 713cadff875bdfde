"""RpcClient: calls the methods of a service through a transport, by name."""
from __future__ import annotations

from typing import Any

from logtide.engine.rpc.service import ServiceDef
from logtide.engine.rpc.transport import GrpcTransport, InProcessTransport, Transport
from logtide.errors import InvalidRequest


class RpcClient:
    """`client.Append(request)` or `client.Append(field=value, ...)`; streaming methods return a
    ResponseStream, client-streaming ones take an iterable of requests."""

    def __init__(self, service: ServiceDef, transport: Transport) -> None:
        self.service = service
        self.transport = transport

    def invoke(self, name: str, request: Any = None, *, timeout: float | None = None, **fields: Any) -> Any:
        method = self.service.method(name)
        if request is None and not method.client_streaming:
            try:
                request = method.request_type(**fields)
            except (TypeError, ValueError) as exc:
                raise InvalidRequest(f"{method.path}: bad request fields: {exc}") from None
        return self.transport.invoke(method, request, timeout)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self.__dict__.get("service", ServiceDef("")).methods:
            raise AttributeError(name)
        return lambda request=None, timeout=None, **fields: self.invoke(name, request, timeout=timeout, **fields)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> "RpcClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(service: ServiceDef, target: Any, *, pipelined: bool = False, carrier: str = "grpc",
            **options: Any) -> RpcClient:
    """A client of `service`: over the network when target is "host:port" (carrier "grpc", or
    "wire": the framed carrier of a WireServer), in-process when it is a servicer.
    pipelined=True carries gRPC unary calls of many threads on one stream (engine/rpc/pipeline.py)."""
    if isinstance(target, str) and carrier == "wire":
        from logtide.engine.rpc.wire_client import WireTransport
        return RpcClient(service, WireTransport(target, **options))
    if isinstance(target, str):
        transport = GrpcTransport(target, **options)
        if pipelined:
            from logtide.engine.rpc.pipeline import PipelinedTransport
            transport = PipelinedTransport(transport)
        return RpcClient(service, transport)
    return RpcClient(service, InProcessTransport(target, **options))
