"""ReadIndex: linearizable reads without writing the log (Raft thesis §6.4).

The leader records its commit index for a read request, then proves it is still the leader by a
heartbeat round tagged with the request's context. Once a majority of voters answered that round
(or any later one), the read may be served as soon as the state machine has applied that index.
"""
from __future__ import annotations

from collections import OrderedDict

from logtide.engine.raft.messages import Message


class ReadIndexStatus:
    __slots__ = ("req", "index", "acks")

    def __init__(self, req: Message, index: int, self_id: int) -> None:
        self.req = req
        self.index = index
        self.acks = {self_id}


class ReadOnly:
    """The pending ReadIndex requests of a leader, oldest first, keyed by context."""

    def __init__(self) -> None:
        self.pending: OrderedDict[bytes, ReadIndexStatus] = OrderedDict()

    def add_request(self, index: int, req: Message, self_id: int) -> None:
        ctx = req.context
        if ctx not in self.pending:
            self.pending[ctx] = ReadIndexStatus(req, index, self_id)

    def recv_ack(self, frm: int, ctx: bytes) -> set | None:
        """Record a heartbeat answer for ctx; the set of acks so far (None for unknown ctx)."""
        rs = self.pending.get(ctx)
        if rs is None:
            return None
        rs.acks.add(frm)
        return rs.acks

    def advance(self, ctx: bytes) -> list[ReadIndexStatus]:
        """ctx is confirmed: it and every request queued before it are released, in order."""
        if ctx not in self.pending:
            return []
        out = []
        while self.pending:
            k, rs = self.pending.popitem(last=False)
            out.append(rs)
            if k == ctx:
                break
        return out

    def last_pending_context(self) -> bytes | None:
        return next(reversed(self.pending)) if self.pending else None

    def reset(self) -> None:
        self.pending.clear()
