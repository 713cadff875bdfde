"""EntryEncodings: the wire form of the entries a replica sent lately.

A leader sends each new entry to every follower, usually in the same turn; serializing an entry
with its CRC once, not once per follower, halves that work with two followers.
Entries are keyed by index and must be the very object encoded before (a new leader's entry at
the same index is another object, so it is encoded anew).
"""
from __future__ import annotations

from logtide.engine.raft.messages import Entry
from logtide.engine.raft.wire import entry_wire

CAPACITY = 8192   # entries remembered; past it the memory starts over (a miss only costs an encode)


class EntryEncodings:
    """get(entry) from any thread (the driver's and the stream senders')."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._by_index: dict[int, tuple[Entry, bytes]] = {}

    def get(self, e: Entry) -> bytes:
        """entry_wire(e), made once per entry object."""
        d = self._by_index
        hit = d.get(e.index)
        if hit is not None and hit[0] is e:
            return hit[1]
        p = entry_wire(e)
        if len(d) >= self.capacity:
            d.clear()
        d[e.index] = (e, p)
        return p
