"""Service definitions: the methods of a service, read from its .proto descriptor, and the call context."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class MethodDef:
    """One RPC method: its wire path, message classes and call shape."""
    name: str             # "Append"
    path: str             # "/logtide.logservice.LogService/Append"
    request_type: type
    response_type: type
    client_streaming: bool
    server_streaming: bool

    @property
    def shape(self) -> str:
        return {(False, False): "unary", (False, True): "server_stream",
                (True, False): "client_stream", (True, True): "bidi"}[(self.client_streaming, self.server_streaming)]


@dataclass(frozen=True)
class ServiceDef:
    """A service interface: full name and methods. Build it with `ServiceDef.from_proto`."""
    name: str                                   # "logtide.logservice.LogService"
    methods: dict[str, MethodDef] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, pb2: ModuleType, service: str) -> "ServiceDef":
        """The service `service` declared in the generated module `pb2` (its .proto is the contract)."""
        desc = pb2.DESCRIPTOR.services_by_name[service]
        methods = {}
        for m in desc.methods:
            methods[m.name] = MethodDef(
                name=m.name, path=f"/{desc.full_name}/{m.name}",
                request_type=_message_class(pb2, m.input_type), response_type=_message_class(pb2, m.output_type),
                client_streaming=m.client_streaming, server_streaming=m.server_streaming)
        return cls(desc.full_name, methods)

    def method(self, name: str) -> MethodDef:
        try:
            return self.methods[name]
        except KeyError:
            from logtide.errors import InvalidRequest
            raise InvalidRequest(f"{self.name} has no method {name!r}") from None


def _message_class(pb2: ModuleType, desc) -> type:
    cls = getattr(pb2, desc.name, None)
    if cls is not None and cls.DESCRIPTOR.full_name == desc.full_name:
        return cls
    from google.protobuf import message_factory
    return message_factory.GetMessageClass(desc)


class CallContext:
    """What a servicer method sees of its call, on either transport."""

    def __init__(self, peer: str, metadata: dict[str, str] | None = None, grpc_context: Any = None,
                 own_call: bool = False, peer_uris: frozenset[str] | None = None) -> None:
        self.peer = peer
        # the URI names of the peer's certificate, when the server's TLS has peer_ids; else None
        self.peer_uris = peer_uris
        self.metadata = metadata or {}
        self._grpc = grpc_context
        self._cancelled = False
        # the gRPC context is this call's own (not a connection whose calls travel in batches)
        self._own_call = own_call
        self._header_sent = False

    def time_remaining(self) -> float | None:
        """Seconds left before this call's deadline; None when no deadline of its own is known
        (in-process calls and the framed carrier's)."""
        if self._own_call and self._grpc is not None:
            return self._grpc.time_remaining()
        return None

    def send_header(self, key: str, value: str) -> None:
        """Send key: value in this gRPC call's initial metadata (once per call; ignored for
        in-process calls and the framed carrier's, whose replies carry no metadata of their own)."""
        if self._own_call and self._grpc is not None and not self._header_sent:
            self._header_sent = True
            self._grpc.send_initial_metadata(((key, value),))

    def is_active(self) -> bool:
        """False once the client went away (cancelled the call or dropped the stream)."""
        if self._grpc is not None:
            return self._grpc.is_active()
        return not self._cancelled

    def cancel(self) -> None:
        self._cancelled = True
