"""Deadlines and liveness of every remote call: one place for every client and server.

- A unary or client-streaming call without its own `timeout` gets the default call deadline and
  ends in DeadlineExceededError when the server does not answer in time (stopped, partitioned,
  overloaded).
- Long-lived streams (WAL meta, logtail push, watch) have no call deadline; HTTP/2 keepalive pings
  in both directions find a peer that is gone, stopped (SIGSTOP: its socket stays open, nobody
  answers) or cut off, and end the stream with RpcError, on the client and in the server's servicer.

Defaults, overridable by environment variables (read when the module is imported, so a process
started with them, e.g. a test's CLI process, uses them everywhere):

| variable                         | default | meaning                                             |
|----------------------------------|---------|-----------------------------------------------------|
| LOGTIDE_RPC_TIMEOUT              | 30      | seconds a unary call may take                       |
| LOGTIDE_RPC_KEEPALIVE            | 10      | seconds between keepalive pings on a connection     |
| LOGTIDE_RPC_KEEPALIVE_TIMEOUT    | 5       | seconds to wait for a ping's answer before closing  |
"""
from __future__ import annotations

import os


def _env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {raw!r}")
    return v


CALL_TIMEOUT_S = _env("LOGTIDE_RPC_TIMEOUT", 30.0)
KEEPALIVE_S = _env("LOGTIDE_RPC_KEEPALIVE", 10.0)
KEEPALIVE_TIMEOUT_S = _env("LOGTIDE_RPC_KEEPALIVE_TIMEOUT", 5.0)


def call_timeout(per_call: float | None, per_client: float | None) -> float | None:
    """The deadline of one unary call: the call's own, else the client's, else the default.
    A value <= 0 means no deadline (only for calls that must wait, e.g. a long promotion)."""
    t = per_call if per_call is not None else per_client if per_client is not None else CALL_TIMEOUT_S
    return t if t > 0 else None


def client_options(keepalive: float | None = None, keepalive_timeout: float | None = None) -> list[tuple]:
    """gRPC channel options: ping the server every `keepalive` s, even on an idle connection."""
    ka = KEEPALIVE_S if keepalive is None else keepalive
    kt = KEEPALIVE_TIMEOUT_S if keepalive_timeout is None else keepalive_timeout
    return [("grpc.keepalive_time_ms", int(ka * 1000)),
            ("grpc.keepalive_timeout_ms", int(kt * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0)]


def server_options(keepalive: float | None = None, keepalive_timeout: float | None = None) -> list[tuple]:
    """gRPC server options: ping every client (a stopped or cut-off client's streams end), and accept
    the clients' pings at the rate they send them (no GOAWAY for "too many pings")."""
    ka = KEEPALIVE_S if keepalive is None else keepalive
    kt = KEEPALIVE_TIMEOUT_S if keepalive_timeout is None else keepalive_timeout
    return [("grpc.keepalive_time_ms", int(ka * 1000)),
            ("grpc.keepalive_timeout_ms", int(kt * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", max(1, int(ka * 500))),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.http2.max_pings_without_data", 0)]
