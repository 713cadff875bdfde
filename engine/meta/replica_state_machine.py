"""ReplicaStateMachine: the meta state machine as a Raft replica drives it (the seed's RSM interface).

The Raft driver thread applies committed entries ({time_ms, cmd}, docs/meta_format.md) while
client threads read and register watches; one lock makes every entry (a whole transaction) appear
at once to them. The hub keeps recent changes (WatchHistory) so a watch can resume after a
cursor. Replacing the state from a snapshot ends every open watch and empties that history: the
changes between the old state and the snapshot are not known here, so a watcher resumes elsewhere
after its last cursor, or re-reads the range.
"""
from __future__ import annotations

import threading
from typing import Any, BinaryIO

from logtide.engine.meta.state_machine import MetaStateMachine
from logtide.engine.meta.watch import WatchHub
from logtide.engine.meta.watch_history import WatchHistory
from logtide.engine.statemachine import Entry, StateMachine


class ReplicaStateMachine(StateMachine):
    """update / lookup / save_snapshot / recover_from_snapshot / close over one MetaStateMachine."""

    def __init__(self) -> None:
        self.lock = threading.RLock()      # held by every apply; readers and watch registration take it
        self.sm = MetaStateMachine()
        self.hub = WatchHub(WatchHistory())
        self.sm.subscribe(self.hub, indexed=True)

    def update(self, entry: Entry) -> Any:
        with self.lock:
            return self.sm.update(entry)

    def lookup(self, query: Any) -> Any:
        with self.lock:
            return self.sm.lookup(query)

    def save_snapshot(self, out: BinaryIO) -> int:
        with self.lock:
            return self.sm.save_snapshot(out)

    def recover_from_snapshot(self, src: BinaryIO) -> int:
        with self.lock:
            index = self.sm.recover_from_snapshot(src)
            self.hub.close_all()
            self.hub.history.reset(index)
            return index

    def close(self) -> None:
        with self.lock:
            self.hub.close_all()
            self.sm.close()
