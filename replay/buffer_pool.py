"""BufferPool: a fixed set of 8 KiB frames caching pages by PageTag, with clock eviction.

Each frame has a state: VALID (holds a page), DIRTY (changed since it was written to the
PageStore; primary only), OUTDATED (the RO startup worker indexed newer WAL for it; the next
reader replays before using it). Frames are rows of one numpy array, so batch redo and batch
checksum run over them directly.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

import numpy as np

from logtide.errors import LogtideError, PeerTimeoutError

PAGE_SIZE = 8192
VALID = 1
DIRTY = 2
OUTDATED = 4


class BufferPoolFullError(LogtideError):
    """Every frame is pinned: no page can be brought in."""


class PinTimeoutError(BufferPoolFullError, PeerTimeoutError):
    """pin() found no frame within `pin_wait_s`: every frame stayed pinned, or held a dirty page that
    may not be written yet (an RO node or the WAL is behind)."""


class BufferPool:
    """Frames of pages addressed by PageTag tuples.

    `evict_dirty(tag, page)` is called (under no pool lock) with a consistent copy of a dirty
    frame before the frame is reused; it returns True once the page is written, False when the
    page may not be written yet (another frame is tried).
    """

    def __init__(self, capacity: int, evict_dirty: Callable[[tuple, np.ndarray], bool] | None = None):
        if capacity < 1:
            raise ValueError("a buffer pool needs at least one frame")
        self.capacity = capacity
        self.frames = np.zeros((capacity, PAGE_SIZE), dtype=np.uint8)
        self.state = np.zeros(capacity, dtype=np.uint8)
        self.pins = np.zeros(capacity, dtype=np.int32)
        self.usage = np.zeros(capacity, dtype=np.uint8)
        self.version = np.zeros(capacity, dtype=np.uint64)  # bumped by mark_dirty
        self.rec_lsn = np.zeros(capacity, dtype=np.uint64)  # LSN that first dirtied the frame (0 = clean)
        self.frame_tag: list[tuple | None] = [None] * capacity
        self.table: dict[tuple, int] = {}
        # memoryviews of the same arrays: per-frame reads and writes as Python ints, without numpy scalars
        self._pins, self._usage, self._state = memoryview(self.pins), memoryview(self.usage), memoryview(self.state)
        self._version, self._rec_lsn = memoryview(self.version), memoryview(self.rec_lsn)
        self.lock = threading.RLock()
        self.unpinned = threading.Condition(self.lock)
        self.waiters = 0   # pins waiting in _victim_wait (under lock): only they need an unpin's notify
        self.pin_wait_s = 10.0  # how long pin waits for a frame to be unpinned before giving up
        self._hand = 0
        self._evict_dirty = evict_dirty
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    # ------------------------------------------------------------------ lookup and pinning
    def lookup(self, tag: tuple) -> int:
        """The frame holding `tag`, or -1."""
        return self.table.get(tuple(tag), -1)

    def pin(self, tag: tuple, load: Callable[[tuple, np.ndarray], None]) -> tuple[int, bool]:
        """Pin the frame of `tag`, loading it with `load(tag, frame)` on a miss. Returns (frame, was_hit).

        The caller unpins with `unpin(frame)`. `load` runs while the frame is pinned but not yet
        visible to other lookups, so no one sees a half-loaded page.
        """
        tag = tuple(tag)
        with self.lock:
            f = self.table.get(tag, -1)
            if f >= 0:   # a hit: no deadline, no retry state
                self._pins[f] += 1
                if self._usage[f] < 3:
                    self._usage[f] += 1
                self.hits += 1
                return f, True
        refused: set[int] = set()
        deadline = time.monotonic() + self.pin_wait_s   # one deadline for the whole pin, retries included
        while True:
            with self.lock:
                f = self.table.get(tag, -1)
                if f >= 0:
                    self.pins[f] += 1
                    self.usage[f] = min(3, self.usage[f] + 1)
                    self.hits += 1
                    return f, True
                f = self._victim_wait(refused, deadline)
                victim_tag = self.frame_tag[f]
                if victim_tag is None or not self.state[f] & DIRTY:
                    self._detach(f)
                    self.pins[f] = 1
                    self.state[f] = 0
                    break
                # a dirty victim: snapshot it while nobody has it pinned (so nobody is changing it),
                # write the snapshot outside the lock, and clear DIRTY only if it did not change since
                snapshot = self.frames[f].copy()
                version = self.version[f]
                self.pins[f] += 1
            written = False
            try:
                if self._evict_dirty is None:
                    raise BufferPoolFullError("a dirty page must be evicted but no writer is attached")
                written = bool(self._evict_dirty(victim_tag, snapshot))
            finally:
                with self.lock:
                    self.pins[f] -= 1
                    if written and self.version[f] == version:
                        self.state[f] &= ~np.uint8(DIRTY)
                        self.rec_lsn[f] = 0
                    self.unpinned.notify_all()
            if not written:
                refused.add(f)  # not writable yet (WAL or RO nodes behind it): try another frame
        try:
            load(tag, self.frames[f])
        except BaseException:
            with self.lock:
                self.pins[f] = 0
                self.unpinned.notify_all()
            raise
        with self.lock:
            other = self.table.get(tag, -1)
            if other >= 0:  # another thread loaded it meanwhile: use theirs
                self.pins[f] = 0
                self.pins[other] += 1
                self.unpinned.notify_all()
                return other, True
            self.table[tag] = f
            self.frame_tag[f] = tag
            self.state[f] = VALID
            self.usage[f] = 1
            self.misses += 1
            return f, False

    def pin_resident(self, tag: tuple) -> int:
        """Pin `tag` only if it is resident (no load); its frame, or -1."""
        with self.lock:
            f = self.table.get(tuple(tag), -1)
            if f >= 0:
                self.pins[f] += 1
            return f

    def unpin(self, frame: int) -> None:
        with self.lock:
            n = self._pins[frame]
            if n <= 0:
                raise LogtideError(f"frame {frame} is not pinned")
            self._pins[frame] = n - 1
            if n == 1 and self.waiters:
                self.unpinned.notify_all()

    def _victim_wait(self, refused: set[int], deadline: float) -> int:
        # under self.lock: wait until `deadline` while every frame is pinned or refused its write-out
        while True:
            try:
                return self._victim(refused)
            except BufferPoolFullError as exc:
                now = time.monotonic()
                if now >= deadline:
                    raise PinTimeoutError(f"{exc} (gave up after pin_wait_s={self.pin_wait_s:g} s)") from None
                self.waiters += 1
                try:
                    self.unpinned.wait(min(0.01, deadline - now) if refused else deadline - now)
                finally:
                    self.waiters -= 1
                refused.clear()

    def _victim(self, refused: set[int] = frozenset()) -> int:
        # clock sweep over unpinned frames; empty frames first
        for _ in range(4 * self.capacity + 1):
            f = self._hand
            self._hand = (self._hand + 1) % self.capacity
            if self.pins[f] or f in refused:
                continue
            if self.frame_tag[f] is None:
                return f
            if self.usage[f]:
                self.usage[f] -= 1
                continue
            return f
        if refused:
            raise BufferPoolFullError(f"no frame of {self.capacity} is free: {len(refused)} hold dirty pages that "
                                      "may not be written yet (an RO node or the WAL is behind), the rest are pinned")
        raise BufferPoolFullError(f"all {self.capacity} frames are pinned")

    def _detach(self, f: int) -> None:
        t = self.frame_tag[f]
        if t is not None:
            del self.table[t]
            self.frame_tag[f] = None
            self.evictions += 1

    # ------------------------------------------------------------------ states
    def mark_outdated(self, tag: tuple) -> bool:
        """Mark `tag` OUTDATED if it is resident; True if it was."""
        with self.lock:
            f = self.table.get(tuple(tag), -1)
            if f < 0:
                return False
            self.state[f] |= OUTDATED
            return True

    def mark_outdated_many(self, tags: Iterable[tuple]) -> int:
        """Batch mark_outdated over an iterable of tags (or an (n, 5) array); returns how many were resident."""
        if isinstance(tags, np.ndarray):
            tags = map(tuple, tags.tolist())
        n = 0
        with self.lock:
            table, state = self.table, self.state
            for t in tags:
                f = table.get(t, -1)
                if f >= 0:
                    state[f] |= OUTDATED
                    n += 1
        return n

    def is_outdated(self, frame: int) -> bool:
        return bool(self.state[frame] & OUTDATED)

    def clear_outdated(self, frame: int) -> None:
        with self.lock:
            self.state[frame] &= ~np.uint8(OUTDATED)

    def mark_dirty(self, frame: int, lsn: int = 0) -> None:
        """Mark the frame changed by the record at `lsn` (the first such LSN is its rec_lsn)."""
        with self.lock:
            st = self._state[frame]
            if not st & DIRTY:
                self._rec_lsn[frame] = lsn
                self._state[frame] = st | DIRTY
            self._version[frame] += 1

    def min_rec_lsn(self) -> int:
        """The smallest rec_lsn of any dirty frame, or 0 when nothing is dirty."""
        with self.lock:
            d = (self.state & DIRTY) != 0
            return int(self.rec_lsn[d].min()) if d.any() else 0

    def clear_dirty(self, frame: int, version: int | None = None) -> bool:
        """Clear DIRTY, but only if the frame is still at `version` (not changed since it was copied)."""
        with self.lock:
            if version is not None and int(self.version[frame]) != version:
                return False
            self.state[frame] &= ~np.uint8(DIRTY)
            self.rec_lsn[frame] = 0
            return True

    def dirty(self) -> list[tuple[tuple, int]]:
        """(tag, frame) of every dirty frame."""
        with self.lock:
            return [(self.frame_tag[f], int(f)) for f in np.nonzero(self.state & DIRTY)[0]]

    def copy_frame(self, frame: int) -> tuple[np.ndarray, int]:
        """A copy of the frame and its version (the caller holds the page's lock, so it is consistent)."""
        with self.lock:
            return self.frames[frame].copy(), int(self.version[frame])

    def resident(self) -> list[tuple[tuple, int]]:
        """(tag, frame) of every resident page."""
        with self.lock:
            return list(self.table.items())

    def evict(self, tag: tuple) -> bool:
        """Drop `tag` if it is resident, clean and unpinned; True if dropped."""
        with self.lock:
            f = self.table.get(tuple(tag), -1)
            if f < 0 or self.pins[f] or self.state[f] & DIRTY:
                return False
            self._detach(f)
            self.state[f] = 0
            self.usage[f] = 0
            return True

    def drop(self, tag: tuple) -> bool:
        """Forget `tag` if it is resident and unpinned, dirty or not (an RO node re-syncing from
        storage: its cached copies, even eager replays, are no longer to be trusted); True if dropped."""
        with self.lock:
            f = self.table.get(tuple(tag), -1)
            if f < 0 or self.pins[f]:
                return False
            self._detach(f)
            self.state[f] = 0
            self.usage[f] = 0
            self.rec_lsn[f] = 0
            return True

    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, tag) -> bool:
        return tuple(tag) in self.table
