"""The RPC layer: service interfaces from .proto files, served in-process or over gRPC.

    svc = ServiceDef.from_proto(my_pb2, "MyService")       # the .proto is the contract
    server = RpcServer("127.0.0.1:0"); server.add_service(svc, MyServicer()); port = server.start()
    client = connect(svc, f"127.0.0.1:{port}")             # or connect(svc, MyServicer()) in-process
    reply = client.MyMethod(field=1)                       # typed LogtideErrors cross the wire

See docs/rpc.md.
"""
from logtide.engine.rpc.client import RpcClient, connect
from logtide.engine.rpc.server import RpcServer
from logtide.engine.rpc.service import CallContext, MethodDef, ServiceDef
from logtide.engine.rpc.transport import (
    DEFAULT_MAX_MESSAGE_SIZE, GrpcTransport, InProcessTransport, ResponseStream, Transport)

__all__ = ["CallContext", "DEFAULT_MAX_MESSAGE_SIZE", "GrpcTransport", "InProcessTransport", "MethodDef",
           "ResponseStream", "RpcClient", "RpcServer", "ServiceDef", "Transport", "connect"]
