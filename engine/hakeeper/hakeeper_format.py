"""The bytes of HAKeeper's commands and snapshots, shared by the encoder and the decoder.

Every command is `magic "HK" | version u8 | tag u8 | body`; every snapshot is
`magic "HKSN" | version u8 | body length u32 | crc32 u32 | body`. Integers are big-endian; a
string is a u16 byte length and UTF-8 bytes; a list is a u32 count and its items. The full
layout is in docs/hakeeper.md.
"""
from __future__ import annotations

import struct
import zlib

from logtide.errors import MalformedCommandError

MAGIC = b"HK"
VERSION = 1
HEADER = struct.Struct(">2sBB")          # magic, version, tag

# command tags
TICK = 1
REGISTER_STORE = 2
LOG_HEARTBEAT = 3
TN_HEARTBEAT = 4
CN_HEARTBEAT = 5
PRIMARY_HEARTBEAT = 6
RO_HEARTBEAT = 7
SCHEDULE_BATCH = 8
INITIAL_CLUSTER = 9
OPERATOR_SCHEDULE = 10
HEARTBEAT_TAGS = frozenset((LOG_HEARTBEAT, TN_HEARTBEAT, CN_HEARTBEAT, PRIMARY_HEARTBEAT, RO_HEARTBEAT))

SNAPSHOT_MAGIC = b"HKSN"
SNAPSHOT_VERSION = 1
SNAPSHOT_HEADER = struct.Struct(">4sBII")  # magic, version, body length, crc32 of the body

U64_MAX = (1 << 64) - 1
MAX_STRING = 1024        # store ids and addresses are short; a longer one is a malformed command
MAX_ITEMS = 1 << 16      # no list in a command or snapshot is longer

_U8, _U16, _U32, _U64 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")


class Writer:
    """Appends fields in the format's encoding; raises MalformedCommandError on values it cannot hold."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def _int(self, s: struct.Struct, v: int, name: str) -> None:
        if isinstance(v, bool) or not isinstance(v, int):
            raise MalformedCommandError(f"{name} must be an int, got {type(v).__name__}")
        try:
            self.parts.append(s.pack(v))
        except struct.error:
            raise MalformedCommandError(f"{name}={v} does not fit in {s.size * 8} unsigned bits") from None

    def u8(self, v: int, name: str = "value") -> None:
        self._int(_U8, v, name)

    def u32(self, v: int, name: str = "value") -> None:
        self._int(_U32, v, name)

    def u64(self, v: int, name: str = "value") -> None:
        self._int(_U64, v, name)

    def boolean(self, v: bool, name: str = "flag") -> None:
        if not isinstance(v, bool):
            raise MalformedCommandError(f"{name} must be a bool")
        self.parts.append(b"\x01" if v else b"\x00")

    def string(self, v: str, name: str = "string") -> None:
        if not isinstance(v, str):
            raise MalformedCommandError(f"{name} must be a str, got {type(v).__name__}")
        raw = v.encode("utf-8", "surrogatepass")
        if len(raw) > MAX_STRING:
            raise MalformedCommandError(f"{name} is {len(raw)} bytes, above {MAX_STRING}")
        self.parts.append(_U16.pack(len(raw)) + raw)

    def count(self, n: int, name: str = "list") -> None:
        if n > MAX_ITEMS:
            raise MalformedCommandError(f"{name} has {n} items, above {MAX_ITEMS}")
        self.parts.append(_U32.pack(n))

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """Reads fields back; any short, oversize or trailing input raises MalformedCommandError (or
    the subclass given as `error`)."""

    def __init__(self, data: bytes, error: type[MalformedCommandError] = MalformedCommandError) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.error = error

    def _take(self, n: int, name: str) -> memoryview:
        end = self.pos + n
        if end > len(self.data):
            raise self.error(f"{name}: command ends after {len(self.data)} bytes, needs {end}")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def u8(self, name: str = "value") -> int:
        return _U8.unpack(self._take(1, name))[0]

    def u32(self, name: str = "value") -> int:
        return _U32.unpack(self._take(4, name))[0]

    def u64(self, name: str = "value") -> int:
        return _U64.unpack(self._take(8, name))[0]

    def boolean(self, name: str = "flag") -> bool:
        b = self.u8(name)
        if b > 1:
            raise self.error(f"{name}: a bool byte is 0 or 1, got {b}")
        return b == 1

    def string(self, name: str = "string") -> str:
        n = _U16.unpack(self._take(2, name))[0]
        if n > MAX_STRING:
            raise self.error(f"{name} is {n} bytes, above {MAX_STRING}")
        try:
            return bytes(self._take(n, name)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{name} is not UTF-8: {exc}") from None

    def count(self, name: str = "list") -> int:
        n = self.u32(name)
        if n > MAX_ITEMS:
            raise self.error(f"{name} claims {n} items, above {MAX_ITEMS}")
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.error(f"{len(self.data) - self.pos} trailing bytes after the command")


def crc(body: bytes) -> int:
    return zlib.crc32(body) & 0xFFFFFFFF
