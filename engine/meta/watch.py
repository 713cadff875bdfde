"""Watch: a stream of (key, prev, current) events over a key range, fed by the state machine."""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Tuple

from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.watch_history import WatchHistory
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
    A change also names its place in apply order, the same on every replica: `index`, the log
    entry that made it, and `pos`, its place among that entry's changes (`cursor`); a watch opened
    with after=cursor (on any replica) goes on from the next change.
    """
    key: Optional[str]
    prev: Optional[SeqV]
    current: Optional[SeqV]
    is_initialization: bool = False
    index: int = 0
    pos: int = 0

    @property
    def is_flush_marker(self) -> bool:
        return self.key is None

    @property
    def cursor(self) -> Tuple[int, int]:
        """(index, pos): where this change is in apply order; (0, 0) for initial_flush events."""
        return (self.index, self.pos)

    @property
    def seq(self) -> int:
        """The seq of the record this change wrote, or removed (a delete takes no seq of its own)."""
        v = self.current if self.current is not None else self.prev
        return v.seq if v is not None else 0

    def __iter__(self):
        """Unpacks as (key, prev, current)."""
        return iter((self.key, self.prev, self.current))


FLUSH_MARKER = WatchEvent(None, None, None, True)
_CLOSED = object()


def check_cursor(c) -> Tuple[int, int]:
    """(index, pos) of ints >= 0; MetaInvalidArgument otherwise."""
    try:
        index, pos = c
    except (TypeError, ValueError):
        raise MetaInvalidArgument(f"a watch cursor is (index, pos), got {c!r}") from None
    for v in (index, pos):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise MetaInvalidArgument(f"a watch cursor is (index, pos) of ints >= 0, got {c!r}")
    return (index, pos)


def check_filter(f) -> str:
    from logtide.engine.meta.match_seq import DELETE
    if f is DELETE:
        return FILTER_DELETE
    if isinstance(f, str) and f.lower() in FILTERS:
        return f.lower()
    raise MetaInvalidArgument(f"watch filter must be one of {FILTERS}, got {f!r}")


class Watcher:
    """An open watch: iterate it (blocks for the next event), or poll with get(timeout); close() ends it."""

    def __init__(self, key: str, key_end: Optional[str], filter: str, on_close=None,
                 after: Tuple[int, int] = (0, -1)):
        self.key, self.key_end, self.filter = key, key_end, filter
        self.after = tuple(after)   # changes at or before this cursor were seen already
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

    def push_changes(self, index: int, changes: Iterable[Tuple[str, Optional[SeqV], Optional[SeqV]]]) -> None:
        """The changes of entry `index`, in order."""
        for pos, (key, prev, cur) in enumerate(changes):
            self.push_change(index, pos, key, prev, cur)

    def push_change(self, index: int, pos: int, key: str, prev: Optional[SeqV], cur: Optional[SeqV]) -> None:
        if (index, pos) > self.after and self.covers(key) and self.wants(cur):
            self._q.put(WatchEvent(key, prev, cur, False, index, pos))

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
    """Fans the state machine's changes out to the open watchers (and keeps them in `history`,
    when it has one, for watches that resume after a cursor)."""

    def __init__(self, history: Optional[WatchHistory] = None):
        self._watchers: List[Watcher] = []
        self._lock = threading.Lock()
        self.history = history

    def add(self, w: Watcher) -> None:
        with self._lock:
            self._watchers.append(w)

    def remove(self, w: Watcher) -> None:
        with self._lock:
            if w in self._watchers:
                self._watchers.remove(w)

    def __call__(self, index: int, changes) -> None:
        if self.history is not None:
            self.history.add(index, changes)
        with self._lock:
            ws = list(self._watchers)
        for w in ws:
            w.push_changes(index, changes)

    def close_all(self) -> None:
        with self._lock:
            ws, self._watchers = self._watchers, []
        for w in ws:
            w.close()


def start_watch(hub: WatchHub, sm, key: str, key_end: Optional[str], filter: str, initial_flush: bool,
                now_ms: int, after: Optional[Tuple[int, int]] = None) -> Watcher:
    """Register a watcher on `hub`; with initial_flush, queue the live keys of the range (at
    `now_ms`) and FLUSH_MARKER first; with `after` (a cursor), queue the kept changes after it
    first (MetaWatchCompacted when they are not all kept). The caller holds the lock the state
    machine applies under, so no change falls between these and the registration."""
    if after is not None:
        after = check_cursor(after)
        if initial_flush:
            raise MetaInvalidArgument("a watch resumes after a cursor or starts with initial_flush, not both")
        if hub.history is None:
            raise MetaInvalidArgument("this meta-service keeps no watch history: it cannot resume after a cursor")
        w = Watcher(key, key_end, filter, on_close=hub.remove, after=after)
        for index, pos, k, prev, cur in hub.history.after(after):
            w.push_change(index, pos, k, prev, cur)
        hub.add(w)
        return w
    w = Watcher(key, key_end, filter, on_close=hub.remove)
    if initial_flush:
        for k, v in sm.range(key, key_end, now_ms):
            w.push(WatchEvent(k, None, v, True))
        w.push(FLUSH_MARKER)
    hub.add(w)
    return w
