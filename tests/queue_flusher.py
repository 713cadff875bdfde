"""QueueFlusher: a test's flusher for a CommitQueue, through the calls the log writer's flusher makes.

`run` is CommitQueue.run over a real segment file; a group it hands back (its end reaches the
queue's `mark` or the roll size, or the index is full) is indexed in the Segment and made durable
exactly as engine/logservice/log_writer.py does, and left unpublished: the test publishes it (or
a prefix of it) when it likes, with `q.publish` or the next run's `publish`.
"""
from __future__ import annotations

import os

from logtide._ext import wal
from logtide._ext.commit_queue import CommitQueue
from logtide.engine.logservice.segment import Segment

NEVER = 1 << 63  # an offset no segment reaches


class QueueFlusher:
    """Binds q to a new segment file in dirpath whose first LSN is first_lsn (fsync="always" when
    sync_always; no lone appender writes itself)."""

    def __init__(self, q: CommitQueue, dirpath: str, first_lsn: int, sync_always: bool = False,
                 roll_at: int = NEVER) -> None:
        self.q = q
        self.seg = Segment(str(dirpath), first_lsn)
        self.fd = os.open(self.seg.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.sync_always = sync_always
        self.roll_at = roll_at
        q.configure(sync_always, False, 0.0)
        q.set_segment(self.fd, 0)
        self._bind()

    def _bind(self) -> None:
        self.q.bind_index(self.fd, *self.seg.index_arrays(), self.seg.size, self.roll_at)

    @property
    def capacity(self) -> int:
        """Offsets the bound index holds: a group needing more comes back to Python."""
        return len(self.seg.index_arrays()[0])

    def run(self, timeout: float, publish: int = 0):
        """q.run(timeout, publish); a group it hands back is indexed and durable, not published."""
        got = self.q.run(timeout, publish)
        if isinstance(got, tuple):
            _, last, starts, nbytes = got
            self.seg.extend(starts, self.seg.size + nbytes)
            self.q.set_durable(last, self.sync_always)
            self._bind()
        return got

    def assert_holds(self, last_lsn: int, size: int, frame_of) -> None:
        """The file (size bytes) and the segment's index hold exactly the frames of the segment's
        first LSN to last_lsn, frame_of(lsn) giving each one's (type, data), and the queue's durable
        LSN is last_lsn."""
        with open(self.seg.path, "rb") as f:
            buf = f.read()
        seg = self.seg
        assert len(buf) == size == seg.size
        assert seg.count == last_lsn - seg.first_lsn + 1 and self.q.durable_lsn == last_lsn
        if not size:
            return
        starts, types, lengths, end, status = wal.scan(buf, 0, seg.first_lsn)
        assert status == wal.OK and end == size
        assert starts.tolist() == seg.starts[:-1].tolist()
        recs = wal.decode(buf, starts, types, lengths, seg.first_lsn, lambda lsn, t, data: (lsn, (t, data)))
        assert all(frame == frame_of(lsn) for lsn, frame in recs)

    def close(self) -> None:
        os.close(self.fd)
