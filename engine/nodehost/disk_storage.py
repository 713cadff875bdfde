"""DiskStorage: a Raft node's durable log, hard state and snapshot, on the log service's storage.

Entries are log-service frames (segment files named by their first index, CRC framing, group
commit through LogWriter, one frame per Raft index); raft_format.py has the bytes. The hard state
and the snapshot's metadata (with the membership at the snapshot) are one state file replaced
atomically; changes after the snapshot are the conf entries of the log itself, so no file can
disagree with the log about membership.

`save(rd)` makes a Ready durable in a fixed order, so a crash between steps leaves one of the
states the simulator's disk model produces (docs/raft.md, "What a crash leaves"):

1. a received snapshot: its image, then the state file (snapshot metadata, the Ready's term and
   vote, commit = the snapshot's index), then a fresh log after it;
2. the entries (a conflicting suffix cut first), synced;
3. the state file, when the term or vote changed.

The state file never names a commit index whose entries are not durable before it: a commit
index learned with the entries of the same Ready would otherwise, after a crash between the
two, commit the stale entries still on disk at those indexes.
"""
from __future__ import annotations

import json
import logging
import mmap
import os
import threading
from collections import OrderedDict
from itertools import repeat

import numpy as np

from logtide._ext import wal
from logtide._ext.crc32c import crc32c
from logtide.engine.logservice.log_format import DEFAULT_SEGMENT_SIZE
from logtide.engine.logservice.log_writer import LogWriter
from logtide.engine.logservice.recovery import recover
from logtide.engine.logservice.segment import Segment
from logtide.engine.logservice.tail_cut import cut_tail
from logtide.engine.raft.errors import CompactedError, CorruptRaftEntry, UnavailableError
from logtide.engine.raft.messages import ENTRY_CONF, ConfState, Entry, HardState, Snapshot, SnapshotMeta
from logtide.engine.raft.raft_format import (
    ENTRY_HEADER, ENTRY_HEADER_SIZE, LOG_DIR, RAFT_ENTRY, SNAP_MAGIC, STATE_FILE, STATE_MAGIC, TRAILER,
    parse_snapshot_name, snapshot_name)
from logtide.engine.raft.storage import founding_entries, limit_size
from logtide.errors import CorruptLogError
from logtide.fsync_dir import fsync_dir
from logtide._ext.durable_io import replace_file_durably

log = logging.getLogger("logtide.raft")

CACHE_ENTRIES = 4096  # the newest entries stay in memory: replication reads them without the disk
MAX_ENTRY_SIZE = 64 << 20


def _framed(magic: bytes, body: bytes) -> bytes:
    return magic + body + TRAILER.pack(len(body), crc32c(body))


def _unframe(magic: bytes, raw: bytes, what: str) -> bytes:
    if len(raw) < len(magic) + TRAILER.size or not raw.startswith(magic):
        raise CorruptRaftEntry(f"{what}: bad magic or too short")
    body = raw[len(magic): -TRAILER.size]
    n, crc = TRAILER.unpack(raw[-TRAILER.size:])
    if n != len(body) or crc != crc32c(body):
        raise CorruptRaftEntry(f"{what}: length or CRC mismatch")
    return body


def _write_atomic(dirpath: str, name: str, data: bytes) -> None:
    path = os.path.join(dirpath, name)
    replace_file_durably(path + ".tmp", path, data)


def encode_entry(e: Entry) -> bytes:
    return ENTRY_HEADER.pack(e.term, e.type) + e.data


def decode_entry(index: int, data: bytes) -> Entry:
    if len(data) < ENTRY_HEADER_SIZE:
        raise CorruptRaftEntry(f"entry {index}: {len(data)} bytes is shorter than its header")
    term, etype = ENTRY_HEADER.unpack_from(data)
    if etype not in (0, ENTRY_CONF):
        raise CorruptRaftEntry(f"entry {index}: unknown entry type {etype}")
    return Entry(term, index, etype, data[ENTRY_HEADER_SIZE:])


class DiskStorage:
    """The Storage interface (storage.py) over a directory, plus the driver's write side."""

    @classmethod
    def open(cls, path, *, voters=None, fsync: str = "always", segment_size: int = DEFAULT_SEGMENT_SIZE) -> "DiskStorage":
        """Open (or create) the Raft storage in `path`. A new directory with `voters` starts as a
        founding member of that group; a new one without is a member to be added later."""
        return cls(os.fspath(path), voters, fsync, segment_size)

    def __init__(self, dirpath: str, voters, fsync: str, segment_size: int) -> None:
        self.dir = os.path.abspath(dirpath)
        self.logdir = os.path.join(self.dir, LOG_DIR)
        os.makedirs(self.logdir, exist_ok=True)
        self.fsync = fsync
        self.segment_size = segment_size
        self._cv = threading.Condition(threading.Lock())
        self._rlock = threading.RLock()  # readers on other threads vs. the driver's compaction and tail cuts
        self._cache: OrderedDict[int, Entry] = OrderedDict()
        fresh = not os.path.exists(os.path.join(self.dir, STATE_FILE))
        self.hard_state, self.snap_meta = self._read_state()
        self.snap = self._read_snapshot(self.snap_meta)
        self._segments = recover(self.logdir, MAX_ENTRY_SIZE + ENTRY_HEADER_SIZE)
        self._writer = None  # before _load_terms, which may reset a log that does not continue the snapshot
        self._load_terms()
        self._open_writer()
        if fresh and voters and self.last_index() == 0:
            self._append_frames(founding_entries(voters))
            self.set_hard_state(HardState(1, 0, len(voters)))

    # --- open ------------------------------------------------------------------------------------

    def _read_state(self) -> tuple[HardState, SnapshotMeta]:
        path = os.path.join(self.dir, STATE_FILE)
        if not os.path.exists(path):
            return HardState(), SnapshotMeta()
        with open(path, "rb") as f:
            s = json.loads(_unframe(STATE_MAGIC, f.read(), f"raft state file {path}"))
        hs = HardState(int(s["term"]), int(s["vote"]), int(s["commit"]))
        meta = SnapshotMeta(int(s["snap_index"]), int(s["snap_term"]), ConfState(s["voters"], s["learners"]))
        return hs, meta

    def _read_snapshot(self, meta: SnapshotMeta) -> Snapshot:
        if meta.index == 0:
            return Snapshot(meta)
        path = os.path.join(self.dir, snapshot_name(meta.index))
        with open(path, "rb") as f:
            return Snapshot(meta, _unframe(SNAP_MAGIC, f.read(), f"raft snapshot {path}"))

    def _load_terms(self) -> None:
        """Read every frame's (term, type) once; decide where the log starts after the snapshot."""
        snap = self.snap_meta.index
        self._terms: list[int] = []
        self._types: list[int] = []
        base = None
        for seg in self._segments:
            if seg.count == 0:
                continue
            if base is None:
                base = seg.first_lsn
            with open(seg.path, "rb") as f:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    arr = np.frombuffer(m, dtype=np.uint8)
                    at = seg.starts[:-1].astype(np.int64) + wal.HEADER_SIZE
                    hdr = arr[at[:, None] + np.arange(ENTRY_HEADER_SIZE)]
                    self._terms.extend(hdr[:, :8].copy().view(">u8").ravel().tolist())
                    self._types.extend(hdr[:, 8].tolist())
                    del arr, hdr
        self._base = base if base is not None else snap + 1  # index of _terms[0]
        # the log must continue the snapshot: hold entry snap+1 (or end exactly at snap with its term)
        last = self._base + len(self._terms) - 1
        ok = self._base <= snap + 1 and last >= snap and (snap == 0 or self._base > snap
                                                          or self._term_at(snap) == self.snap_meta.term)
        if not ok:
            if self._terms:
                log.warning("raft log %s does not continue the snapshot at %d: discarded", self.logdir, snap)
            self._reset_log(snap + 1)
            return
        self._first = snap + 1

    def _term_at(self, i: int) -> int:
        return self._terms[i - self._base]

    def _reset_log(self, first: int) -> None:
        with self._rlock:
            self._reset_log_now(first)

    def _reset_log_now(self, first: int) -> None:
        """Remove every segment and start an empty log at `first` (after a snapshot install)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for seg in self._segments:
            seg.close()
            os.unlink(seg.path)
        seg = Segment(self.logdir, first)
        open(seg.path, "ab").close()
        fsync_dir(self.logdir)
        self._segments[:] = [seg]
        self._terms, self._types = [], []
        self._base = self._first = first
        self._cache.clear()

    def _open_writer(self) -> None:
        if not self._segments:
            seg = Segment(self.logdir, self._first)
            open(seg.path, "ab").close()
            fsync_dir(self.logdir)
            self._segments.append(seg)
        self._writer = LogWriter(self.logdir, self._segments, self._cv, self.fsync, self.segment_size)

    # --- the Storage interface -----------------------------------------------------------------------

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.hard_state, self.snap_meta.conf

    def conf_entries(self) -> list[Entry]:
        idx = [self._base + k for k, t in enumerate(self._types) if t == ENTRY_CONF and self._base + k >= self._first]
        return [self.entries(i, i + 1)[0] for i in idx]

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return self._base + len(self._terms) - 1

    def term(self, i: int) -> int:
        if i == self.snap_meta.index:
            return self.snap_meta.term
        if i < self._first:
            raise CompactedError(f"index {i} is compacted (first index {self._first})")
        if i > self.last_index():
            raise UnavailableError(f"index {i} is beyond the last index {self.last_index()}")
        return self._terms[i - self._base]

    def snapshot(self) -> Snapshot:
        return self.snap

    def entries(self, lo: int, hi: int, max_size: int = 1 << 62) -> list[Entry]:
        if lo < self._first:
            raise CompactedError(f"index {lo} is compacted (first index {self._first})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries [{lo}, {hi}) go beyond the last index {self.last_index()}")
        cache = self._cache
        if lo in cache and hi - 1 in cache:
            try:
                return limit_size([cache[i] for i in range(lo, hi)], max_size)
            except KeyError:  # evicted by a concurrent append: read the disk
                pass
        with self._rlock:
            return limit_size(self._read(lo, hi, max_size), max_size)

    def _read(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        out: list[Entry] = []
        size = 0
        i = lo
        while i < hi and (not out or size < max_size):
            seg = next(s for s in reversed(self._segments) if s.first_lsn <= i)
            k = i - seg.first_lsn
            n = min(hi - i, seg.count - k)
            start, end = seg.offset_of(i), int(seg.starts[k + n])
            buf = seg.pread(start, end - start)
            starts, types, lengths, stop, status = wal.scan(buf, 0, i, n, max_length=MAX_ENTRY_SIZE + ENTRY_HEADER_SIZE)
            if len(starts) != n or any(int(t) != RAFT_ENTRY for t in types):
                what = wal.STATUS_NAMES.get(status, status) if len(starts) != n else "not a Raft entry frame"
                raise CorruptRaftEntry(f"corrupt Raft entry {i + len(starts)} in {os.path.basename(seg.path)} at "
                                       f"offset {start + stop}: {what}")
            for rec in wal.decode(buf, starts, types, lengths, i, lambda lsn, _t, d: decode_entry(lsn, d)):
                out.append(rec)
                size += rec.size()
            i += n
        return out

    # --- the write side (the driver's) ---------------------------------------------------------------

    def save(self, rd) -> None:
        """Make a Ready durable: snapshot, then entries, then hard state (see the module doc)."""
        hs = rd.hard_state
        if rd.snapshot is not None:
            self.apply_snapshot(rd.snapshot, hs)
        if rd.entries:
            self.append(rd.entries)
        if hs is not None:
            old = self.hard_state
            self.hard_state = HardState(hs.term, hs.vote, hs.commit)
            if hs.term != old.term or hs.vote != old.vote:
                self._write_state()
            # else: the commit index alone need not be durable (it is learned again from the leader)

    def set_hard_state(self, hs: HardState) -> None:
        self.hard_state = HardState(hs.term, hs.vote, hs.commit)
        self._write_state()

    def _write_state(self) -> None:
        hs, meta = self.hard_state, self.snap_meta
        body = json.dumps({"term": hs.term, "vote": hs.vote, "commit": hs.commit, "snap_index": meta.index,
                           "snap_term": meta.term, "voters": sorted(meta.conf.voters),
                           "learners": sorted(meta.conf.learners)}, sort_keys=True).encode()
        _write_atomic(self.dir, STATE_FILE, _framed(STATE_MAGIC, body))

    def append(self, ents: list[Entry]) -> None:
        first = ents[0].index
        if first < self._first:
            ents = [e for e in ents if e.index >= self._first]
            if not ents:
                return
            first = ents[0].index
        if first > self.last_index() + 1:
            raise UnavailableError(f"appending at {first} leaves a gap after {self.last_index()}")
        if first <= self.last_index():
            self._truncate_suffix(first)
        self._append_frames(ents)

    def _append_frames(self, ents: list[Entry]) -> None:
        term, etype = ents[0].term, ents[0].type
        n = len(ents)
        shared = all(e.term == term and e.type == etype for e in ents)
        if shared:   # a leader's batch: one shared header
            got = self._writer.append(RAFT_ENTRY, ENTRY_HEADER.pack(term, etype), [e.data for e in ents])
        else:
            got = self._writer.append(RAFT_ENTRY, b"", [encode_entry(e) for e in ents])
        if got != ents[0].index:
            raise CorruptLogError(f"raft log wrote index {ents[0].index} at LSN {got}")
        if shared:
            self._terms.extend(repeat(term, n))
            self._types.extend(repeat(etype, n))
        else:
            self._terms.extend(e.term for e in ents)
            self._types.extend(e.type for e in ents)
        cache = self._cache
        cache.update(zip(range(got, got + n), ents))   # indexes run from `got`, checked above
        while len(cache) > CACHE_ENTRIES:
            cache.popitem(last=False)

    def _truncate_suffix(self, index: int) -> None:
        with self._rlock:
            self._truncate_suffix_now(index)

    def _truncate_suffix_now(self, index: int) -> None:
        """Drop entries >= index (a new leader replaced an uncommitted tail)."""
        self._writer.close()
        segs = self._segments
        while len(segs) > 1 and segs[-1].first_lsn >= index:
            seg = segs.pop()
            seg.close()
            os.unlink(seg.path)
        seg = segs[-1]
        k = index - seg.first_lsn
        end = seg.offset_of(index) if k < seg.count else seg.size
        seg.close()
        cut_tail(seg.path, end)
        fsync_dir(self.logdir)
        segs[-1] = Segment(self.logdir, seg.first_lsn, seg.starts[:k].copy(), end)
        del self._terms[index - self._base:]
        del self._types[index - self._base:]
        for i in [i for i in self._cache if i >= index]:
            del self._cache[i]
        self._writer = LogWriter(self.logdir, self._segments, self._cv, self.fsync, self.segment_size)

    def apply_snapshot(self, snap: Snapshot, hs: HardState | None = None) -> None:
        """Install a snapshot received from the leader: image, state file, then a fresh log.

        The state file's commit is the snapshot's index: entries after it are not written yet. A
        crash before the fresh log leaves the old one, which open() keeps only if it continues the
        snapshot (its entries past the snapshot are then uncommitted ones, as on any follower)."""
        meta = snap.meta
        if meta.index <= self.snap_meta.index:
            return
        _write_atomic(self.dir, snapshot_name(meta.index), _framed(SNAP_MAGIC, snap.data))
        self.snap, self.snap_meta = snap, meta
        base = hs if hs is not None else self.hard_state
        self.hard_state = HardState(base.term, base.vote, meta.index)
        self._write_state()
        self._reset_log(meta.index + 1)
        self._open_writer()
        self._remove_old_snapshots()

    def create_snapshot(self, index: int, conf: ConfState, data: bytes) -> Snapshot:
        """Record the state machine's image at `index` (<= applied) as the snapshot."""
        if index <= self.snap_meta.index:
            return self.snap
        meta = SnapshotMeta(index, self.term(index), conf)
        _write_atomic(self.dir, snapshot_name(index), _framed(SNAP_MAGIC, bytes(data)))
        self.snap, self.snap_meta = Snapshot(meta, bytes(data)), meta
        self._write_state()
        self._remove_old_snapshots()
        return self.snap

    def compact(self, index: int) -> None:
        with self._rlock:
            self._compact_now(index)

    def _compact_now(self, index: int) -> None:
        """Entries up to `index` are no longer needed (it must not pass the snapshot)."""
        index = min(index, self.snap_meta.index)
        if index < self._first:
            return
        self._first = index + 1
        with self._cv:
            n = 0
            segs = self._segments
            while n < len(segs) - 1 and segs[n + 1].first_lsn <= index + 1:
                n += 1
            victims = segs[:n]
            del segs[:n]
        for seg in victims:
            seg.close()
            os.unlink(seg.path)
        if victims:
            fsync_dir(self.logdir)
            drop = self._segments[0].first_lsn - self._base
            del self._terms[:drop]
            del self._types[:drop]
            self._base = self._segments[0].first_lsn

    def _remove_old_snapshots(self) -> None:
        for name in os.listdir(self.dir):
            i = parse_snapshot_name(name)
            if i is not None and i < self.snap_meta.index:
                os.unlink(os.path.join(self.dir, name))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for seg in self._segments:
            seg.close()
