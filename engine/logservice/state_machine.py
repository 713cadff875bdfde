"""The log service's replicated state machine: truncated LSN, TSO reservation, registered readers.

Records themselves are the log's entries; this machine holds the metadata MatrixOne keeps in its
RSM. Single-node today: the service applies each command with `update` and persists a snapshot.
"""
from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

from logtide._ext.crc32c import crc32c
from logtide.engine.statemachine import Entry, StateMachine
from logtide.errors import CorruptionError, InvalidArgument, InvalidTruncateLsn, LogServiceError

SNAPSHOT_MAGIC = b"LTLSSM01"
_TRAILER = struct.Struct("<II")  # body length, crc32c(body)


def command(op: str, **args: Any) -> bytes:
    """Encode one state machine command."""
    return json.dumps({"op": op, **args}, sort_keys=True).encode()


class LogStateMachine(StateMachine):
    """Commands: truncate(lsn, latest), reserve_tso(limit), register(name, lsn), unregister(name),
    report(name, lsn). Lookups: "truncated_lsn", "tso_limit", "readers", "min_reader_lsn", "index"."""

    def __init__(self) -> None:
        self.index = 0
        self.truncated_lsn = 0
        self.tso_limit = 1  # every TSO value below this may have been handed out
        self.readers: dict[str, int] = {}
        self._closed = False

    def update(self, entry: Entry) -> Any:
        if self._closed:
            raise LogServiceError("state machine is closed")
        try:
            cmd = json.loads(entry.cmd)
            op = cmd["op"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"malformed log service command: {entry.cmd[:80]!r}") from exc
        result = self._apply(op, cmd)  # raises before any change when the command is refused
        self.index = entry.index
        return result

    def _apply(self, op: str, cmd: dict) -> Any:
        if op == "truncate":
            lsn, latest = int(cmd["lsn"]), int(cmd["latest"])
            if lsn <= self.truncated_lsn:
                raise InvalidTruncateLsn(f"truncate({lsn}): the truncated LSN is already {self.truncated_lsn}; "
                                         "it only moves up")
            if lsn > latest:
                raise InvalidTruncateLsn(f"truncate({lsn}): beyond the latest LSN {latest}")
            self.truncated_lsn = lsn
            return lsn
        if op == "reserve_tso":
            self.tso_limit = max(self.tso_limit, int(cmd["limit"]))
            return self.tso_limit
        if op == "register":
            self.readers[str(cmd["name"])] = max(int(cmd["lsn"]), self.readers.get(str(cmd["name"]), 0))
            return self.readers[str(cmd["name"])]
        if op == "unregister":
            return self.readers.pop(str(cmd["name"]), None)
        if op == "report":
            name = str(cmd["name"])
            if name not in self.readers:
                raise InvalidArgument(f"reader {name!r} is not registered")
            self.readers[name] = max(self.readers[name], int(cmd["lsn"]))  # replayed LSNs never go back
            return self.readers[name]
        raise InvalidArgument(f"unknown log service command {op!r}")

    def lookup(self, query: Any) -> Any:
        if query == "truncated_lsn":
            return self.truncated_lsn
        if query == "tso_limit":
            return self.tso_limit
        if query == "readers":
            return dict(self.readers)
        if query == "min_reader_lsn":
            return min(self.readers.values()) if self.readers else None
        if query == "index":
            return self.index
        raise InvalidArgument(f"unknown log service lookup {query!r}")

    def save_snapshot(self, out: BinaryIO) -> int:
        body = json.dumps({"index": self.index, "truncated_lsn": self.truncated_lsn,
                           "tso_limit": self.tso_limit, "readers": self.readers}, sort_keys=True).encode()
        out.write(SNAPSHOT_MAGIC + body + _TRAILER.pack(len(body), crc32c(body)))
        return self.index

    def recover_from_snapshot(self, src: BinaryIO) -> int:
        raw = src.read()
        if len(raw) < len(SNAPSHOT_MAGIC) + _TRAILER.size or not raw.startswith(SNAPSHOT_MAGIC):
            raise CorruptionError("log service state snapshot: bad magic or too short")
        body = raw[len(SNAPSHOT_MAGIC): -_TRAILER.size]
        n, crc = _TRAILER.unpack(raw[-_TRAILER.size:])
        if n != len(body) or crc != crc32c(body):
            raise CorruptionError("log service state snapshot: length or CRC mismatch")
        try:    # a body with a valid CRC but the wrong shape (written by hand, or by a bug)
            s = json.loads(body)
            index, truncated, tso = int(s["index"]), int(s["truncated_lsn"]), int(s["tso_limit"])
            readers = {str(k): int(v) for k, v in s["readers"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptionError(f"log service state snapshot: malformed body ({type(exc).__name__}: {exc})") from None
        self.index, self.truncated_lsn, self.tso_limit, self.readers = index, truncated, tso, readers
        return self.index

    def close(self) -> None:
        self._closed = True
