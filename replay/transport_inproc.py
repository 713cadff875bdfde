"""The in-process transport: the embedded default. A sender thread hands stream messages straight
to the RO node's receiver, and feedback is a direct call on the primary."""
from __future__ import annotations

import logging
import threading

from logtide.replay.wal_sender import meta_frames

log = logging.getLogger("logtide.replay.inproc")


class InProcessLink:
    """Connects one RO node to a primary in the same process."""

    def __init__(self, primary, ro, batch: int = 1024, heartbeat: float = 0.05):
        self.primary = primary
        self.ro = ro
        self._stop = threading.Event()
        start, ready = primary.subscribe(ro.node_id, ro.resume_from())
        ro._link = self
        ro.attach(start, ready, primary.feedback)
        start = ro.applied_lsn + 1  # a node attached again resumes where it is
        self._thread = threading.Thread(target=self._run, args=(start, batch, heartbeat),
                                        name=f"sender-ro{ro.node_id}", daemon=True)
        self._thread.start()

    def _run(self, start: int, batch: int, heartbeat: float) -> None:
        try:
            for frame in meta_frames(self.primary, start, self._stop, batch, heartbeat):
                if self.ro.error is not None:
                    return
                self.ro.receive(frame)
        except Exception:
            if not self._stop.is_set():
                log.exception("in-process WAL-meta sender to RO node %s stopped", self.ro.node_id)

    def close(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)


def connect_inprocess(primary, ro, **kw) -> InProcessLink:
    """Subscribe `ro` to `primary` and start streaming WAL meta to it."""
    return InProcessLink(primary, ro, **kw)
