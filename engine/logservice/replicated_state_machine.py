"""The replicated log service's state machine: what every replica applies from the Raft log.

Each Raft entry's data is one command:

    b"A" [u64 BE client][u64 BE seq][u32 BE record type] [record data]   append one record
    b"B" [u64 BE client][u64 BE seq][u32 BE record type][u64 BE first seq] [record data]
                                                                        one record of a multi-record
                                                                          append (seqs first seq, +1, ...)
    b"C" JSON                                                           a LogStateMachine command
                                                                          (truncate, register, report,
                                                                           unregister) or {"op": "tso"}

An append's LSN is its Raft index. Exactly-once: the machine remembers each client's last seq and
the LSN it got, so a retried append (same client, same seq) that reaches the log again is a
duplicate: it returns the original LSN and its index is hidden from reads. For its latest
multi-record append the machine also remembers every record's LSN (`runs`), so a retried batch
gets each record's original LSN, whichever prefix of it had reached the log. Internal entries (the
leader's no-op, membership changes, "C" commands, duplicates) are skipped by reads: LSNs of user
records are increasing but not dense.
"""
from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

from logtide._ext.crc32c import crc32c
from logtide.engine.logservice.state_machine import LogStateMachine
from logtide.engine.statemachine import Entry, StateMachine
from logtide.errors import CorruptionError, InvalidArgument

APPEND = b"A"
BATCH_APPEND = b"B"
COMMAND = b"C"
APPEND_HEADER = struct.Struct(">QQI")  # client, seq, record type
APPEND_HEADER_SIZE = 1 + APPEND_HEADER.size
FIRST_SEQ = struct.Struct(">Q")        # a batch record's first seq, after the append header
BATCH_HEADER_SIZE = APPEND_HEADER_SIZE + FIRST_SEQ.size
SNAPSHOT_MAGIC = b"LTRLSM01"
_TRAILER = struct.Struct("<II")


def append_command(client: int, seq: int, rtype: int, data: bytes) -> bytes:
    return APPEND + APPEND_HEADER.pack(client, seq, rtype) + data


def batch_append_commands(client: int, first_seq: int, rtype: int, datas: list[bytes]) -> list[bytes]:
    """The commands of one multi-record append: record k has seq first_seq + k."""
    head = FIRST_SEQ.pack(first_seq)
    return [BATCH_APPEND + APPEND_HEADER.pack(client, first_seq + k, rtype) + head + d for k, d in enumerate(datas)]


def json_command(op: str, **args: Any) -> bytes:
    return COMMAND + json.dumps({"op": op, **args}, sort_keys=True).encode()


def parse_append(cmd: bytes) -> tuple[int, int, int, bytes] | None:
    """(client, seq, type, data) of an append command (single or batch), or None for any other entry."""
    kind = cmd[:1]
    if kind == APPEND and len(cmd) >= APPEND_HEADER_SIZE:
        client, seq, rtype = APPEND_HEADER.unpack_from(cmd, 1)
        return client, seq, rtype, cmd[APPEND_HEADER_SIZE:]
    if kind == BATCH_APPEND and len(cmd) >= BATCH_HEADER_SIZE:
        client, seq, rtype = APPEND_HEADER.unpack_from(cmd, 1)
        return client, seq, rtype, cmd[BATCH_HEADER_SIZE:]
    return None


class ReplicatedLogStateMachine(StateMachine):
    """Sessions for exactly-once appends, the hidden duplicates, the TSO, and (inside) the single-node
    LogStateMachine's truncated LSN and registered readers."""

    def __init__(self) -> None:
        self.meta = LogStateMachine()
        self.index = 0
        self.sessions: dict[int, tuple[int, int]] = {}   # client -> (last seq, its LSN)
        self.runs: dict[int, tuple[int, list[int]]] = {}  # client -> (first seq, LSNs) of its latest batch
        self.duplicates: set[int] = set()                 # indexes of retried appends (hidden)
        self.last_record = 0                              # the LSN of the newest user record
        self.tso_next = 1

    def update(self, entry: Entry) -> Any:
        cmd = entry.cmd
        self.index = entry.index
        kind = cmd[:1]
        if kind == APPEND or kind == BATCH_APPEND:
            if len(cmd) < (APPEND_HEADER_SIZE if kind == APPEND else BATCH_HEADER_SIZE):
                raise InvalidArgument(f"truncated append command {cmd[:16]!r}")
            client, seq, _rtype = APPEND_HEADER.unpack_from(cmd, 1)   # the record's data is not needed here
            last = self.sessions.get(client)
            if last is not None and seq <= last[0]:
                self.duplicates.add(entry.index)
                if seq == last[0]:
                    return last[1]  # the retry of an append that is already in the log
                run = self.runs.get(client)
                if run is not None and run[0] <= seq < run[0] + len(run[1]):
                    return run[1][seq - run[0]]  # a retried batch: this record is in the log already
                raise InvalidArgument(f"append seq {seq} of client {client} is older than its last ({last[0]})")
            self.sessions[client] = (seq, entry.index)
            if kind == BATCH_APPEND:
                (first,) = FIRST_SEQ.unpack_from(cmd, APPEND_HEADER_SIZE)
                run = self.runs.get(client)
                # each attempt of a batch reaches the log as a prefix of it, so its new records extend
                # the run in seq order; its first record starts a new one
                if seq != first and run is not None and run[0] + len(run[1]) == seq:
                    run[1].append(entry.index)
                else:
                    self.runs[client] = (seq, [entry.index])
            self.last_record = entry.index
            return entry.index
        if kind == COMMAND:
            try:
                c = json.loads(cmd[1:])
                op = c["op"]
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidArgument(f"malformed log service command {cmd[:60]!r}") from exc
            if op == "tso":
                count = int(c["count"])
                first = self.tso_next
                self.tso_next += count
                return first
            if op == "truncate":
                c["latest"] = entry.index  # everything up to this entry is in the log
            return self.meta.update(Entry(entry.index, json.dumps(c).encode()))
        raise InvalidArgument(f"unknown replicated log command {cmd[:16]!r}")

    def lookup(self, query: Any) -> Any:
        if query == "tso_next":
            return self.tso_next
        if query == "last_record":
            return self.last_record
        if query == "deletion_bound":
            bound = self.meta.truncated_lsn
            lowest = self.meta.lookup("min_reader_lsn")
            return bound if lowest is None else min(bound, lowest)
        return self.meta.lookup(query)

    def save_snapshot(self, out: BinaryIO) -> int:
        import io
        inner = io.BytesIO()
        self.meta.save_snapshot(inner)
        body = json.dumps({"index": self.index, "meta": inner.getvalue().hex(), "tso_next": self.tso_next,
                           "last_record": self.last_record,
                           "sessions": {str(k): list(v) for k, v in self.sessions.items()},
                           "runs": {str(k): [v[0], v[1]] for k, v in self.runs.items()},
                           "duplicates": sorted(self.duplicates)}, sort_keys=True).encode()
        out.write(SNAPSHOT_MAGIC + body + _TRAILER.pack(len(body), crc32c(body)))
        return self.index

    def recover_from_snapshot(self, src: BinaryIO) -> int:
        import io
        raw = src.read()
        if len(raw) < len(SNAPSHOT_MAGIC) + _TRAILER.size or not raw.startswith(SNAPSHOT_MAGIC):
            raise CorruptionError("replicated log snapshot: bad magic or too short")
        body = raw[len(SNAPSHOT_MAGIC): -_TRAILER.size]
        n, crc = _TRAILER.unpack(raw[-_TRAILER.size:])
        if n != len(body) or crc != crc32c(body):
            raise CorruptionError("replicated log snapshot: length or CRC mismatch")
        s = json.loads(body)
        self.meta = LogStateMachine()
        self.meta.recover_from_snapshot(io.BytesIO(bytes.fromhex(s["meta"])))
        self.index, self.tso_next, self.last_record = int(s["index"]), int(s["tso_next"]), int(s["last_record"])
        self.sessions = {int(k): (int(v[0]), int(v[1])) for k, v in s["sessions"].items()}
        self.runs = {int(k): (int(v[0]), [int(i) for i in v[1]]) for k, v in s.get("runs", {}).items()}
        self.duplicates = {int(i) for i in s["duplicates"]}
        return self.index

    def close(self) -> None:
        self.meta.close()
