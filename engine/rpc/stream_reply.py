"""The bytes of one response a server sends on a stream, checked against its method and the
client's frame limit (both ends of a server stream: a thread's and the loop's)."""
from __future__ import annotations

from typing import Any

from logtide.engine.rpc.service import MethodDef
from logtide.errors import MessageTooLarge

# MSG frame bytes beside the message: the frame header and the stream id
MSG_OVERHEAD = 9


def stream_reply(method: MethodDef, response: Any, peer_limit: int) -> bytes:
    """response serialized; TypeError for a wrong type (the servicer's bug), MessageTooLarge past the limit."""
    if not isinstance(response, method.response_type):
        raise TypeError(f"{method.path}: servicer returned {type(response).__name__}, not "
                        f"{method.response_type.__name__}")
    data = response.SerializeToString()
    if len(data) + MSG_OVERHEAD > peer_limit:
        raise MessageTooLarge(f"{method.path}: a reply of {len(data)} bytes is over the client's "
                              f"limit of {peer_limit}")
    return data
