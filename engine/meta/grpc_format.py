"""The meta-service gRPC wire contract (docs/meta_format.md, "gRPC"): names, limits, status mapping.

Each method carries one canonical-JSON document per message (no protobuf schema): requests are
the log's own command objects and the read queries below; replies name the leader.
"""
SERVICE = "logtide.meta.v1.Meta"
METHOD_WRITE = "Write"     # unary: {"cmd": command}                       -> {"leader", "upsert"|"txn"}
METHOD_READ = "Read"       # unary: {"get": key} | {"mget": [key]} | {"list": {"prefix", "limit"}}
                           #        | {"seq": null}                          -> {"leader", "result"}
METHOD_WATCH = "Watch"     # server stream: {"key", "key_end", "filter", "initial_flush"} -> {"leader", "event"}

# a request may hold a 1 MiB value in base64 plus its envelope; anything above is refused by gRPC
MAX_MESSAGE_BYTES = 4 << 20
# how often a watch stream checks whether its client went away
WATCH_POLL_S = 0.25


def path(method: str) -> str:
    return f"/{SERVICE}/{method}"
