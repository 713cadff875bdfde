"""The in-process transport: the embedded default. A sender thread hands stream messages straight
to the RO node's receiver, and feedback is a direct call on the primary."""
from __future__ import annotations

import logging
import threading

from logtide.errors import ReplicaError
from logtide.replay.wal_sender import meta_frames

log = logging.getLogger("logtide.replay.inproc")


class InProcessLink:
    """Connects one RO node to a primary in the same process."""

    def __init__(self, primary, ro, batch: int = 1024, heartbeat: float = 0.05):
        self.primary = primary
        self.ro = ro
        self._batch, self._heartbeat = batch, heartbeat
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        ro._link = self
        self._join()

    def _join(self) -> None:
        start, ready = self.ro.join(self.primary.subscribe)
        self.ro.attach(start, ready, self.primary.feedback)
        start = self.ro.applied_lsn + 1  # a node attached again resumes where it is
        self._thread = threading.Thread(target=self._run, args=(start, self._stop), name=f"sender-ro{self.ro.node_id}",
                                        daemon=True)
        self._thread.start()

    def _run(self, start: int, stop: threading.Event) -> None:
        node = self.ro.node_id
        try:
            for frame in meta_frames(self.primary, start, stop, self._batch, self._heartbeat):
                if self.ro.error is not None:
                    return
                self.primary.check_following(node)   # a dropped node gets nothing more
                self.ro.receive(frame)
        except ReplicaError as exc:
            if not stop.is_set():
                log.warning("WAL-meta sender to RO node %s stopped: %s", node, exc)
        except Exception:
            if not stop.is_set():
                log.exception("in-process WAL-meta sender to RO node %s stopped", node)

    def rejoin(self) -> None:
        """Subscribe again after the primary dropped the node (it re-syncs), and restart the sender."""
        with self._lock:
            if self._closed:
                return
            self._stop.set()
            if self._thread is not None and threading.current_thread() is not self._thread:
                self._thread.join(timeout=10)
            self._stop = threading.Event()
            self._join()

    def close(self) -> None:
        """Close the link: the primary drops the node."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self.ro._send_feedback = None   # nothing to report to any more
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        if not self.primary.stopped:
            self.primary.unsubscribe(self.ro.node_id)


def connect_inprocess(primary, ro, **kw) -> InProcessLink:
    """Subscribe `ro` to `primary` and start streaming WAL meta to it."""
    return InProcessLink(primary, ro, **kw)
