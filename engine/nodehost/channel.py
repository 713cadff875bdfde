"""Clients of a replica's address: the framed carrier (logtide's own, the default), or gRPC
channels that come back fast after a restart.

A framed client opens a new connection at the first call after its connection broke, so a replica
that restarts is reachable again at once. gRPC's default reconnect backoff grows from 1 s to 120 s,
and channels to one address share a subchannel (and its backoff) process-wide: a replica killed
and restarted a few times would stay unreachable for seconds after it is back. gRPC channels made
here retry every 50-500 ms and own their subchannel.
"""
from __future__ import annotations

from logtide.engine.rpc import DEFAULT_MAX_MESSAGE_SIZE, GrpcTransport, RpcClient
from logtide.engine.rpc.tls import PLAINTEXT, TlsOption, grpc_channel
from logtide.engine.rpc.tls import resolve as tls_resolve
from logtide.engine.rpc.wire_client import WireTransport
from logtide.errors import InvalidArgument

RECONNECT_MIN_MS = 50
RECONNECT_MAX_MS = 500


def replica_channel_options(max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[tuple]:
    """gRPC options of a channel to a replica: message limits, fast reconnects, its own connection."""
    return [
        ("grpc.max_send_message_length", max_message_size),
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_MIN_MS),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_MIN_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
        ("grpc.use_local_subchannel_pool", 1),
    ]


def replica_channel(address: str, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, tls: TlsOption = None):
    return grpc_channel(address, replica_channel_options(max_message_size), tls_resolve(tls))


class ReplicaTransport(GrpcTransport):
    """The RPC layer's gRPC transport (typed errors across the wire) over a replica_channel."""

    def __init__(self, address: str, *, timeout: float | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, tls: TlsOption = None) -> None:
        super().__init__(address, max_message_size=max_message_size, timeout=timeout, connect_timeout=None, tls=tls)
        default = self._channel  # no call has used it yet: swap in the fast-reconnecting channel
        self.channel_options = replica_channel_options(max_message_size)
        self._channel = replica_channel(address, max_message_size, self.tls or PLAINTEXT)
        default.close()


def connect_replica(service, address: str, timeout: float | None = None, *, carrier: str = "wire",
                    connect_timeout: float | None = None, tls: TlsOption = None) -> RpcClient:
    """A client of `service` at a replica's address: over the framed carrier (carrier="wire"), or
    gRPC with fast reconnects (carrier="grpc"). `timeout` is each call's deadline. A framed client
    connects at its first call (within that call's deadline), or at once within `connect_timeout`
    when one is given (then a replica that does not answer raises here)."""
    if carrier == "wire":
        return RpcClient(service, WireTransport(address, timeout=timeout, connect_timeout=connect_timeout, tls=tls))
    if carrier == "grpc":
        return RpcClient(service, ReplicaTransport(address, timeout=timeout, tls=tls))
    raise InvalidArgument(f"carrier must be 'wire' or 'grpc', got {carrier!r}")
