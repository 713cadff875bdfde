"""Sequential specifications for the linearizability checker.

A model is init() -> state and step(state, input, output) -> (ok, new state); states are hashable
(the checker caches them). Output UNKNOWN (a timed-out call) is accepted by every step.
"""
from __future__ import annotations

from typing import Any, Protocol

from logtide.engine.raft.lincheck.history import UNKNOWN, Operation


class Model(Protocol):
    def init(self) -> Any: ...

    def step(self, state: Any, input: Any, output: Any) -> tuple[bool, Any]: ...

    def prune(self, ops: list) -> list:
        """Drop timed-out operations whose effect no completed operation observed: for them "took
        no effect" is always a consistent choice, and leaving them in multiplies the search."""


class RegisterModel:
    """One register: ("write", v) -> None, ("read",) -> v. Starts at 0."""

    def init(self) -> int:
        return 0

    def step(self, state, input, output):
        if input[0] == "write":
            return True, input[1]
        return (output is UNKNOWN or output == state), state

    def prune(self, ops):
        return [o for o in ops if not (o.output is UNKNOWN and o.input[0] == "read")]


class LogModel:
    """The log service: append, read, truncate, get_truncated_lsn and the TSO.

    State: (records, truncated LSN, next TSO). records is a tuple of (lsn, payload) in log order;
    an append that timed out may have taken effect with an LSN nobody saw (None) until a read binds it.

    Inputs and outputs:
      ("append", payload[, rank]) -> lsn: LSNs grow in log order (internal Raft entries leave gaps);
      ("read", first_lsn) -> tuple of (lsn, payload): every record at or after first_lsn, or "truncated"
          when first_lsn is at or below the truncated LSN;
      ("truncate", lsn) -> "ok" | "invalid": the truncated LSN only moves up, never past the log;
      ("truncated",) -> lsn;
      ("tso", count) -> first: ranges [first, first + count) are disjoint and increasing.
    """

    def init(self):
        return ((), 0, 1)

    def prune(self, ops):
        """Also binds a timed-out append that a read saw: payloads are unique, so it took effect
        at the LSN the read shows (its return time stays unknown)."""
        seen: dict = {}
        for o in ops:
            if o.input[0] == "read" and isinstance(o.output, tuple):
                for lsn, p in o.output:
                    seen.setdefault(p, lsn)
        keep = []
        for o in ops:
            if o.output is UNKNOWN:
                kind = o.input[0]
                if kind in ("read", "truncated", "tso") or (kind == "append" and o.input[1] not in seen):
                    continue
                if kind == "append":
                    o = Operation(o.client, o.input, o.call, seen[o.input[1]], o.ret)
            keep.append(o)
        return _order_appends(keep)

    def step(self, state, input, output):
        records, truncated, tso = state
        op = input[0]
        if op == "append":
            if output is UNKNOWN:
                return True, (records + ((None, input[1]),), truncated, tso)
            last = max((lsn for lsn, _p in records if lsn is not None), default=0)
            if not isinstance(output, int) or output <= last:
                return False, state
            if len(input) > 2 and input[2] != 1 + sum(1 for lsn, _p in records if lsn is not None):
                return False, state  # not the next append in LSN order (see _order_appends)
            return True, (records + ((output, input[1]),), truncated, tso)
        if op == "read":
            if output is UNKNOWN:
                return True, state
            first = input[1]
            if output == "truncated":
                return first <= truncated, state
            bound = _match_read(records, first, output)
            return (bound is not None), (bound if bound is not None else records, truncated, tso)
        if op == "truncate":
            lsn = input[1]
            last = max((l for l, _p in records if l is not None), default=0)
            if output is UNKNOWN:
                return True, (records, max(truncated, lsn), tso) if truncated < lsn <= last else state
            if output == "ok":
                return (truncated < lsn), (records, lsn, tso)
            return (lsn <= truncated or lsn > last), state
        if op == "truncated":
            return (output is UNKNOWN or output == truncated), state
        if op == "tso":
            if output is UNKNOWN:
                return True, state
            if not isinstance(output, int) or output < tso:
                return False, state
            return True, (records, truncated, output + input[1])
        raise ValueError(f"unknown log operation {op!r}")


class KVKeyModel:
    """One key of the meta-service (check a history partitioned by key; the global seq is checked
    on its own). State: (seq, value); seq None after a timed-out write that took effect (its seq
    is then learnt from the next operation that shows it). Starts absent: (0, None).

    Inputs and outputs (value bytes unique per write):
      ("put", v) -> (prev_seq, prev_value, new_seq): an upsert that always matches;
      ("cas", expected_seq, v) -> (prev_seq, prev_value, new_seq): applied iff the key's seq was
          expected_seq (then new_seq > prev_seq), else new_seq == prev_seq and nothing changes;
      ("get",) -> (seq, value): a linearizable read ((0, None) when absent).
    """

    def init(self):
        return (0, None)

    def prune(self, ops):
        """Drop timed-out reads, and timed-out writes whose value nobody saw (as a read's value or
        a write's previous value): never taking effect is then consistent."""
        seen = set()
        for o in ops:
            if o.output is not UNKNOWN:
                seen.add(o.output[1])
        return [o for o in ops if o.output is not UNKNOWN or (o.input[0] != "get" and o.input[-1] in seen)]

    def step(self, state, input, output):
        seq, value = state
        op = input[0]
        if op == "get":
            if output is UNKNOWN:
                return True, state
            oseq, ovalue = output
            return ((seq is None or oseq == seq) and ovalue == value), (oseq, ovalue)
        if op not in ("put", "cas"):
            raise ValueError(f"unknown kv operation {op!r}")
        v = input[-1]
        if output is UNKNOWN:
            applies = op == "put" or seq is None or seq == input[1]
            return True, ((None, v) if applies else state)
        prev_seq, prev_value, new_seq = output
        if (seq is not None and prev_seq != seq) or prev_value != value:
            return False, state
        if op == "cas" and (new_seq != prev_seq) != (prev_seq == input[1]):
            return False, state
        if op == "cas" and new_seq == prev_seq:
            return True, (prev_seq, value)
        return new_seq > prev_seq, (new_seq, v)


def _order_appends(ops: list) -> list:
    """Appends with known LSNs take effect in LSN order, so each gets its rank in that order as a
    third input field, and the model accepts an append only as the next rank. Without it the search
    would linearize a later LSN first and explore everything up to the earlier one's return before
    learning that order was impossible."""
    idx = sorted((k for k, o in enumerate(ops) if o.input[0] == "append" and isinstance(o.output, int)),
                 key=lambda k: ops[k].output)
    out = list(ops)
    for rank, k in enumerate(idx, 1):
        o = ops[k]
        out[k] = Operation(o.client, (o.input[0], o.input[1], rank), o.call, o.output, o.ret)
    return out


def _match_read(records, first: int, out) -> tuple | None:
    """The records with unseen LSNs bound by this read, or None if the read cannot be right."""
    out = tuple(out)
    lsns = [lsn for lsn, _p in out]
    if any(lsn < first for lsn in lsns) or any(b <= a for a, b in zip(lsns, lsns[1:])):
        return None
    expected = []  # (position in records, lsn or None, payload) of records that may lie at or after first
    below = 0      # the highest known LSN below first
    for k, (lsn, payload) in enumerate(records):
        if lsn is not None and lsn < first:
            expected = []  # everything before a record below `first` is below it too
            below = lsn
        else:
            expected.append((k, lsn, payload))
    j = 0
    room = first - 1 - below  # LSNs free for unseen records between `below` and `first`
    while (j < room and j < len(expected) and expected[j][1] is None
           and (not out or expected[j][2] != out[0][1])):
        j += 1  # a timed-out append that landed below `first`
    rest = expected[j:]
    if len(rest) != len(out):
        return None
    bound = list(records)
    for (k, lsn, payload), (olsn, opayload) in zip(rest, out):
        if payload != opayload or (lsn is not None and lsn != olsn):
            return None
        if lsn is None:
            bound[k] = (olsn, payload)
    return tuple(bound)
