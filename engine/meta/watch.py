"""Watch: a stream of (key, prev, current) events over a key range, fed by the state machine."""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Tuple

from logtide.engine.meta.seqv import SeqV
from logtide.errors import MetaClosedError, MetaInvalidArgument

FILTER_ALL = "all"          # every change
FILTER_UPDATE = "update"    # changes that leave a value (insert, update)
FILTER_DELETE = "delete"    # removals (delete, expiry, delete_by_prefix)
FILTERS = (FILTER_ALL, FILTER_UPDATE, FILTER_DELETE)
ALL, UPDATE = FILTER_ALL, FILTER_UPDATE   # filter=ALL | UPDATE | DELETE (DELETE is the value sentinel)


@dataclass(frozen=True)
class WatchEvent:
    """One change: key, prev and current (None = absent). is_initialization marks initial_flush events.

    The marker that ends the initial flush is the event with key None and is_initialization True.
    """
    key: Optional[str]
    prev: Optional[SeqV]
    current: Optional[SeqV]
    is_initialization: bool = False

    @property
    def is_flush_marker(self) -> bool:
        return self.key is None

    def __iter__(self):
        """Unpacks as (key, prev, current)."""
        return iter((self.key, self.prev, self.current))


FLUSH_MARKER = WatchEvent(None, None, None, True)
_CLOSED = object()


def check_filter(f) -> str:
    from logtide.engine.meta.match_seq import DELETE
    if f is DELETE:
        return FILTER_DELETE
    if isinstance(f, str) and f.lower() in FILTERS:
        return f.lower()
    raise MetaInvalidArgument(f"watch filter must be one of {FILTERS}, got {f!r}")


class Watcher:
    """An open watch: iterate it (blocks for the next event), or poll with get(timeout); close() ends it."""

    def __init__(self, key: str, key_end: Optional[str], filter: str, on_close=None):
        self.key, self.key_end, self.filter = key, key_end, filter
        self._q: "queue.SimpleQueue" = queue.SimpleQueue()
        self._closed = threading.Event()
        self._on_close = on_close

    def covers(self, key: str) -> bool:
        if self.key_end is None:
            return key == self.key
        return self.key <= key < self.key_end

    def wants(self, current: Optional[SeqV]) -> bool:
        if self.filter == FILTER_ALL:
            return True
        return (current is None) == (self.filter == FILTER_DELETE)

    def push(self, ev: WatchEvent) -> None:
        self._q.put(ev)

    def push_changes(self, changes: Iterable[Tuple[str, Optional[SeqV], Optional[SeqV]]]) -> None:
        for key, prev, cur in changes:
            if self.covers(key) and self.wants(cur):
                self._q.put(WatchEvent(key, prev, cur))

    def get(self, timeout: Optional[float] = None) -> Optional[WatchEvent]:
        """The next event, or None after `timeout` seconds; raises MetaClosedError once closed and drained."""
        try:
            ev = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if ev is _CLOSED:
            self._q.put(_CLOSED)
            raise MetaClosedError("the watch stream is closed")
        return ev

    def drain(self) -> List[WatchEvent]:
        """Every event already queued, without waiting."""
        out = []
        while True:
            try:
                ev = self.get(timeout=0)
            except MetaClosedError:
                return out
            if ev is None:
                return out
            out.append(ev)

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            try:
                ev = self.get()
            except MetaClosedError:
                return
            if ev is not None:
                yield ev

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._q.put(_CLOSED)
            if self._on_close is not None:
                self._on_close(self)

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class WatchHub:
    """Fans the state machine's changes out to the open watchers."""

    def __init__(self):
        self._watchers: List[Watcher] = []
        self._lock = threading.Lock()

    def add(self, w: Watcher) -> None:
        with self._lock:
            self._watchers.append(w)

    def remove(self, w: Watcher) -> None:
        with self._lock:
            if w in self._watchers:
                self._watchers.remove(w)

    def __call__(self, changes) -> None:
        with self._lock:
            ws = list(self._watchers)
        for w in ws:
            w.push_changes(changes)

    def close_all(self) -> None:
        with self._lock:
            ws, self._watchers = self._watchers, []
        for w in ws:
            w.close()


def start_watch(hub: WatchHub, sm, key: str, key_end: Optional[str], filter: str, initial_flush: bool,
                now_ms: int) -> Watcher:
    """Register a watcher on `hub`; with initial_flush, queue the live keys of the range (at
    `now_ms`) and FLUSH_MARKER first. The caller holds the lock the state machine applies under,
    so no change falls between the flush and the registration."""
    w = Watcher(key, key_end, filter, on_close=hub.remove)
    if initial_flush:
        for k, v in sm.range(key, key_end, now_ms):
            w.push(WatchEvent(k, None, v, True))
        w.push(FLUSH_MARKER)
    hub.add(w)
    return w
