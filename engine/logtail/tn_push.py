"""The TN's logtail push: a stream per CN, subscribed per table, sent every published commit in ts
order (or a heartbeat) by one push thread."""
from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from logtide.engine.logtail.push_batch import merge_entries
from logtide.engine.logtail.transport import LocalStream, decode_request
from logtide.errors import LogtideError, MalformedMessageError, StreamClosedError, UnknownTableError

if TYPE_CHECKING:
    from logtide.engine.logtail.tn import TransactionNode

log = logging.getLogger(__name__)
FAILED_TSO_BACKOFF_S = 0.2   # between heartbeat attempts while the log's TSO fails


class TnPush:
    """TransactionNode's push streams (a part of TransactionNode, see tn.py)."""

    @property
    def stream_count(self) -> int:
        """Push streams open now (a CN whose stream died, e.g. cut by keepalive, is no longer counted)."""
        with self._cv:
            return len(self._streams)

    def connect(self, cn_name: str = "cn") -> LocalStream:
        """A new push stream for one CN (in-process transport)."""
        s = LocalStream(cn_name)
        with self._cv:
            if self._closed:
                raise StreamClosedError("the TN is closed")
            self._streams.append(s)
        threading.Thread(target=self._serve_stream, args=(s,), name=f"logtail-stream-{cn_name}",
                         daemon=True).start()
        return s

    def _serve_stream(self, s: LocalStream) -> None:
        while True:
            try:
                frame = s.tn_recv()
            except StreamClosedError:
                break
            try:
                req = decode_request(frame)
                table = req["table"]
                with self._cv:
                    self._table(table)
                    if req["op"] == "subscribe":
                        # push what is published first, so a subscriber sees every commit
                        # acknowledged before it asked, and the stream stays in commit order
                        if self.last_ts > self.pushed_ts:
                            self._push_to(self.last_ts)
                        resp = self._collect(table, 0, self.pushed_ts)
                        resp["def"] = self.tables[table].tdef.to_json()
                        s.subscribed.add(table)
                        s.send_to_cn(("subscribed", resp))
                    else:
                        s.subscribed.discard(table)
                        s.send_to_cn(("unsubscribed", table))
            except StreamClosedError:
                break
            except (MalformedMessageError, UnknownTableError) as exc:
                try:
                    s.send_to_cn(("error", type(exc).__name__, str(exc)))
                except StreamClosedError:
                    break
        with self._cv:
            if s in self._streams:
                self._streams.remove(s)

    def _push_idle(self) -> bool | None:
        """Under _cv: None once closed, else whether nothing is waiting to be pushed."""
        return None if self._closed else self.last_ts <= self.pushed_ts

    def _push_round(self) -> bool | None:
        """Under _cv, after the push thread's wait (see run_pusher): push what is new. False once the
        TN is closed; None when a heartbeat is due (nothing new, nothing in flight)."""
        if self._closed:
            return False
        if self.last_ts > self.pushed_ts:
            self._push_to(self.last_ts)
        elif self.committer.pending() == 0:
            return None
        return True

    def _push_heartbeat(self, ts: int) -> None:
        """Under _cv: a heartbeat, an empty transaction at `ts`, moving every watermark. `ts` was
        taken outside the commit lock; a commit that took an older ts was then holding the lock, so
        it is queued (no heartbeat: its ts would fall below it) or published (pushed first)."""
        if self._closed:
            return
        if self.last_ts > self.pushed_ts:
            self._push_to(self.last_ts)
        elif self.committer.pending() == 0 and ts > self.pushed_ts:
            self._push_to(ts)

    def _push_to(self, to_ts: int) -> None:
        """Send (pushed_ts, to_ts] to every stream, one batch per table and kind. Holds _cv."""
        from_ts = self.pushed_ts
        per_table: dict[str, list] = {}
        wanted = set().union(*(s.subscribed for s in self._streams))   # nobody reads the others
        if to_ts > from_ts and wanted:
            for _, tb, es in self.logtail.visit(from_ts, to_ts):
                if tb in wanted:
                    per_table.setdefault(tb, []).extend(es)
            per_table = {tb: merge_entries(es) for tb, es in per_table.items()}
        self.pushed_ts = to_ts
        if to_ts > self.last_ts:
            self.last_ts = to_ts
        for s in list(self._streams):
            try:
                s.send_to_cn(("update", from_ts, to_ts,
                              {t: es for t, es in per_table.items() if t in s.subscribed}))
            except StreamClosedError:
                self._streams.remove(s)


def run_pusher(ref: "weakref.ref[TransactionNode]", cv: threading.Condition, heartbeat_s: float) -> None:
    """The push thread: waits up to a heartbeat for commits, then pushes them (or a heartbeat),
    until the TN is closed. It holds the TN only while it pushes, not while it waits, so a TN nobody
    closed is still collected, and closed by its __del__, possibly on this thread.

    A heartbeat's ts comes from the log's TSO outside the commit lock: with a remote log the call
    waits on a peer, up to the log's deadline, and commits must not wait behind it. A failed call
    is logged and retried; the thread outlives it."""
    failing = False
    while True:
        with cv:
            tn = ref()
            idle = None if tn is None else tn._push_idle()
            del tn
            if idle is None:
                return
            if idle:
                cv.wait(FAILED_TSO_BACKOFF_S if failing else heartbeat_s)
            tn = ref()
            if tn is None:
                return
            todo = tn._push_round()
            if todo is False:
                return
            if todo is not None:
                del tn
                continue
        try:
            ts = tn.log.get_tso_timestamp(1)
        except LogtideError as exc:
            if not failing:
                log.warning("logtail push: no heartbeat ts from the log (%s); retrying", exc)
            failing = True
            del tn
            continue
        if failing:
            log.warning("logtail push: the log answers again; heartbeats resume")
            failing = False
        with cv:
            tn._push_heartbeat(ts)
        del tn
