"""Limits of the meta-service's gRPC service (meta.proto is the message contract)."""
# a request may hold a 1 MiB value plus its envelope; anything above is refused by the transport
MAX_MESSAGE_BYTES = 4 << 20
# how often a watch stream checks whether its client went away
WATCH_POLL_S = 0.25
# a watch stream has no deadline of its own (gRPC needs one: ten years)
WATCH_DEADLINE_S = 10 * 365 * 24 * 3600.0
