"""The call pipeline's packed framing: many calls (or replies) in one bytes field.

A CallBatch carries its calls as one `frames` blob instead of one protobuf sub-message per call:

    call frame:  [u64 id][u16 method][u32 length][request: length bytes]     (little-endian)
    reply frame: [u64 id][u32 length][response: length bytes]

`method` indexes the batch's `methods` list. A caller packs its own frame (header + request) and
the sender only joins them. (The client's packing and the server's splitting run in C,
_ext/call_slots.pyx and _ext/frame_codec.pyx; these functions are their model.) Replies
that fail travel as PipelinedReply messages beside the blob (they carry the error's code, class
and message). A blob whose last frame is cut short or whose length field points past its end is a
MalformedFrames error: the frames before it are not trusted either.
"""
from __future__ import annotations

import struct

from logtide.errors import InvalidRequest

CALL_HEADER = struct.Struct("<QHI")
REPLY_HEADER = struct.Struct("<QI")
MAX_METHODS = 1 << 16      # method indexes are u16
MAX_ID = (1 << 64) - 1


class MalformedFrames(InvalidRequest):
    """A frames blob that does not split into whole frames (truncated, or a length past its end)."""


def pack_call(call_id: int, method: int, request: bytes) -> bytes:
    """One call frame: header and request bytes."""
    return CALL_HEADER.pack(call_id, method, len(request)) + request


def pack_reply(call_id: int, response: bytes) -> bytes:
    """One reply frame: header and response bytes."""
    return REPLY_HEADER.pack(call_id, len(response)) + response


def unpack_calls(blob: bytes) -> list[tuple[int, int, bytes]]:
    """(id, method index, request bytes) of every call frame in `blob`, in order."""
    out = []
    unpack, hsize = CALL_HEADER.unpack_from, CALL_HEADER.size
    pos, end = 0, len(blob)
    while pos < end:
        if end - pos < hsize:
            raise MalformedFrames(f"call frame at offset {pos}: {end - pos} bytes left, a header needs {hsize}")
        call_id, method, n = unpack(blob, pos)
        pos += hsize
        if n > end - pos:
            raise MalformedFrames(f"call frame {call_id} at offset {pos - hsize}: length {n} runs "
                                  f"{n - (end - pos)} bytes past the end of the batch")
        out.append((call_id, method, blob[pos:pos + n]))
        pos += n
    return out


def unpack_replies(blob: bytes) -> list[tuple[int, bytes]]:
    """(id, response bytes) of every reply frame in `blob`, in order."""
    out = []
    unpack, hsize = REPLY_HEADER.unpack_from, REPLY_HEADER.size
    pos, end = 0, len(blob)
    while pos < end:
        if end - pos < hsize:
            raise MalformedFrames(f"reply frame at offset {pos}: {end - pos} bytes left, a header needs {hsize}")
        call_id, n = unpack(blob, pos)
        pos += hsize
        if n > end - pos:
            raise MalformedFrames(f"reply frame {call_id} at offset {pos - hsize}: length {n} runs "
                                  f"{n - (end - pos)} bytes past the end of the batch")
        out.append((call_id, blob[pos:pos + n]))
        pos += n
    return out
