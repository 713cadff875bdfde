"""The compute node (CN): subscribes to tables on the TN, applies pushed logtail, serves reads at a ts.

On losing its stream it reconnects and subscribes again to every table it had; each subscribe
response rebuilds that table's state from scratch (checkpoint + logtail), so the CN ends with exactly
the TN's state: nothing missed, nothing twice. Reads keep using the old state until the new one is in.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

import pyarrow as pa

from logtide.arg_checks import seconds_arg
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.logtail_format import Entry
from logtide.engine.logtail.partition_state import BlockCache, PartitionState
from logtide.engine.logtail.transport import encode_request
from logtide.engine.logtail.logtail_args import pk_arg, ts_arg
from logtide.engine.objectstore import ObjectStore
from logtide.errors import LogtailError, RpcError, StreamClosedError, UnknownTableError, WatermarkTimeoutError

log = logging.getLogger(__name__)


class ComputeNode:
    """A CN. connect() returns a new stream to the TN (TransactionNode.connect, or a remote one)."""

    def __init__(self, connect: Callable, store: ObjectStore, name: str = "cn",
                 reconnect_delay: float = 0.01, connect_timeout: float = 30.0) -> None:
        self.name = name
        self._connect = connect
        self.reconnect_delay = seconds_arg("reconnect_delay", reconnect_delay, allow_none=False)
        connect_timeout = seconds_arg("connect_timeout", connect_timeout, allow_none=False)
        self.cache = BlockCache(store)
        self.store = store
        self.states: dict[str, PartitionState] = {}
        self.watermarks: dict[str, int] = {}
        self.wanted: set[str] = set()
        self.errors: list[tuple] = []
        self.reconnects = 0
        self.applied_rows = 0
        self.on_update: Callable | None = None     # called with (to_ts) after each applied update
        self._cv = threading.Condition()
        self._closed = False
        self._gen = 0                 # stream generation: subscribe waits for a response on the current one
        self._fresh: set[str] = set()  # tables subscribed on the current stream
        self._backoff = 0.0
        self.stream = self._first_stream(connect_timeout)
        self._connected_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"cn-{name}", daemon=True)
        self._thread.start()

    def _first_stream(self, timeout: float):
        # a CN started beside its TN (cluster up, a TN restart) may come up first: retry until the deadline
        deadline = time.monotonic() + timeout
        delay = self.reconnect_delay
        said = 0.0
        while True:
            try:
                return self._connect()
            except (OSError, RpcError, StreamClosedError) as exc:
                if time.monotonic() - said >= 1.0:     # an operator sees why a CN is not serving yet
                    log.warning("%s: no stream to the TN yet: %s", self.name, exc)
                    said = time.monotonic()
                if time.monotonic() + delay > deadline:
                    raise StreamClosedError(f"{self.name}: no stream to the TN in {timeout:g} s: {exc}") from exc
                time.sleep(delay)
                delay = min(0.5, delay * 2)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        try:
            self.stream.close()
        except Exception:
            pass
        # applying one message is bounded; a process that exits while the receiver is still in
        # pyarrow (GIL released) aborts in the interpreter's finalization
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            log.warning("%s: the receiver thread did not end within 30 s of close()", self.name)

    # ------------------------------------------------------------------ API

    def subscribe(self, table: str, timeout: float = 30.0) -> None:
        """Subscribe to a table and wait until its state is in; UnknownTableError for a bad name
        (a refused name changes nothing)."""
        _table_name(table)      # before `wanted`: every reconnect subscribes to what it holds again
        timeout = seconds_arg("timeout", timeout, allow_none=False)
        with self._cv:
            n_err = len(self.errors)
            self.wanted.add(table)
            self._send("subscribe", table)
            deadline = time.monotonic() + timeout
            while table not in self._fresh:
                for kind, msg in self.errors[n_err:]:
                    if table in msg:
                        self.wanted.discard(table)
                        raise UnknownTableError(msg) if kind == "UnknownTableError" else LogtailError(msg)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WatermarkTimeoutError(f"subscribe({table!r}) got no response in {timeout:g} s")
                self._cv.wait(left)

    def unsubscribe(self, table: str) -> None:
        _table_name(table)
        with self._cv:
            self.wanted.discard(table)
            self._send("unsubscribe", table)

    def _send(self, op: str, table: str) -> None:
        try:
            self.stream.send_to_tn(encode_request(op, table))
        except StreamClosedError:
            pass    # the receiver reconnects and subscribes to everything wanted again

    def watermark(self, table: str) -> int:
        return self.watermarks.get(table, 0)

    def wait_for(self, table: str, ts: int, timeout: float = 30.0) -> None:
        """Block until the table's watermark reaches ts; WatermarkTimeoutError after `timeout` s.
        TypeError for a ts that is not an int, InvalidArgument (a ValueError) for a negative one."""
        ts = ts_arg("ts", ts)
        _table_name(table)
        timeout = seconds_arg("timeout", timeout, allow_none=False)
        with self._cv:
            if table not in self.wanted:
                raise UnknownTableError(f"{self.name} is not subscribed to {table!r}")
            deadline = time.monotonic() + timeout
            while self.watermarks.get(table, 0) < ts:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WatermarkTimeoutError(f"{table!r} watermark {self.watermarks.get(table, 0)} < {ts} "
                                                f"after {timeout:g} s")
                self._cv.wait(left)

    def read(self, table: str, ts: int | None = None, *, timeout: float = 30.0,
             use_block_index: bool = True) -> pa.Table:
        """The table as of ts (default: the watermark), once the watermark reaches ts; ts is
        checked as wait_for checks it."""
        ts = self.watermark(table) if ts is None else ts_arg("ts", ts)
        self.wait_for(table, ts, timeout)
        return self.states[table].read(ts, use_block_index)

    def get(self, table: str, pk: int, ts: int | None = None, *, timeout: float = 30.0) -> dict | None:
        """The row with primary key pk as of ts (default: the watermark), or None; ts is checked as
        wait_for checks it, pk must be an int64."""
        pk = pk_arg("pk", pk)
        ts = self.watermark(table) if ts is None else ts_arg("ts", ts)
        self.wait_for(table, ts, timeout)
        return self.states[table].get(pk, ts)

    # ------------------------------------------------------------------ receiving

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._closed:
                    return
            try:
                msg = self.stream.cn_recv(timeout=0.2)
            except StreamClosedError:
                self._reconnect()
                continue
            if msg is None:
                continue
            try:
                self._handle(msg)
            except LogtailError as exc:   # a gap or a bad message: start over on a new stream
                with self._cv:
                    self.errors.append(("LogtailError", str(exc)))
                self.stream.cut()
            except Exception as exc:      # noqa: BLE001 - a message of a shape we did not expect
                # the receiver must outlive it: dead, it would leave every later read to time out
                log.exception("%s: a message from the TN could not be handled; starting a new stream", self.name)
                with self._cv:
                    self.errors.append((type(exc).__name__, str(exc)))
                self.stream.cut()

    def _reconnect(self) -> None:
        # back off while streams die young (the TN is down), up to a second between attempts
        if time.monotonic() - self._connected_at < 1.0:
            self._backoff = min(1.0, max(self.reconnect_delay, self._backoff * 2))
            time.sleep(self._backoff)
        else:
            self._backoff = 0.0
        while True:
            with self._cv:
                if self._closed:
                    return
            try:
                stream = self._connect()
                break
            except Exception:
                time.sleep(max(self.reconnect_delay, self._backoff))
        self._connected_at = time.monotonic()
        with self._cv:
            late = self._closed       # close() came while we connected: the new stream is ours to end
            if not late:
                self.reconnects += 1
                self._gen += 1
                self._fresh = set()
                self.stream = stream
                for t in sorted(self.wanted):
                    self._send("subscribe", t)
        if late:
            stream.close()            # outside the lock: it waits for the stream's pump

    def _handle(self, msg) -> None:
        kind = msg[0]
        if kind == "subscribed":
            resp = msg[1]
            table = resp["table"]
            ps = PartitionState(TableDef.from_json(resp["def"]), self.cache)
            if resp["checkpoint"]:
                body = json.loads(self.store.get(resp["checkpoint"]))
                objs = body["tables"].get(table, {}).get("objects", [])
                ps.apply([Entry("meta", body["ts"], meta={"cleanup_ts": 0, "objects": objs})])
            ps.apply(resp["entries"])
            with self._cv:
                if table in self.wanted:
                    self.states[table] = ps
                    self.watermarks[table] = resp["to_ts"]
                    self._fresh.add(table)
                self._cv.notify_all()
        elif kind == "update":
            _, from_ts, to_ts, tables = msg
            with self._cv:
                live = [t for t in self._fresh]
            for t in live:
                ps = self.states[t]
                if self.watermarks[t] < from_ts:
                    raise LogtailError(f"{t}: update ({from_ts}, {to_ts}] after watermark {self.watermarks[t]}")
                if self.watermarks[t] >= to_ts:
                    continue        # already covered by the subscribe response
                # the subscribe response may reach past from_ts (it can carry a checkpoint newer than
                # the last push): only what is above the watermark is new
                es = [e for e in tables.get(t, ()) if e.ts > self.watermarks[t]]
                if es:
                    ps.apply(es)
                    self.applied_rows += sum(e.rows for e in es)
            with self._cv:
                for t in live:
                    if self.watermarks[t] < to_ts:
                        self.watermarks[t] = to_ts
                self._cv.notify_all()
            if self.on_update is not None:
                self.on_update(to_ts)
        elif kind == "unsubscribed":
            with self._cv:
                self._fresh.discard(msg[1])
                self.states.pop(msg[1], None)
                self.watermarks.pop(msg[1], None)
        elif kind == "error":
            with self._cv:
                self.errors.append((msg[1], msg[2]))
                self._cv.notify_all()


def _table_name(table: object) -> None:
    """UnknownTableError unless `table` is a str (a table name the TN may know)."""
    if not isinstance(table, str):
        raise UnknownTableError(f"a table name is a str, got {type(table).__name__} {table!r}")
