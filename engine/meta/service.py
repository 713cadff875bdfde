"""MetaService: the embedded meta-service. Every write is proposed as a log entry {time_ms, cmd},
made durable in the log (when the service has one), then applied to the state machine.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from logtide.engine.meta.command import (
    TxnCmd, UpsertCmd, check_key, check_match_seq, make_spec)
from logtide.engine.meta.log_entry import encode_entry
from logtide.engine.meta.match_seq import ANY, MatchSeq
from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.state_machine import MetaStateMachine
from logtide.engine.meta.txn_reply import TxnReply
from logtide.engine.meta.watch import FLUSH_MARKER, WatchEvent, Watcher, WatchHub, check_filter
from logtide.errors import MetaClosedError, MetaInvalidArgument


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class MetaService:
    """Databend's KV semantics: seq, MatchSeq, TTL on log time, conditional transactions, watch."""

    def __init__(self, sm: Optional[MetaStateMachine] = None, clock: Optional[Callable[[], int]] = None,
                 leader: Optional[str] = None):
        self._sm = sm if sm is not None else MetaStateMachine()
        self._clock = clock or wall_clock_ms
        self._lock = threading.RLock()
        self._hub = WatchHub()
        self._sm.subscribe(self._hub)
        self._last_time_ms = self._sm.last_time_ms
        self._closed = False
        self.leader = leader     # the address of the leader, named in every RPC reply

    @classmethod
    def in_memory(cls, clock: Optional[Callable[[], int]] = None) -> "MetaService":
        """A service with no log and no snapshot: its state lives and dies with the process."""
        return cls(clock=clock)

    # ------------------------------------------------------------------ proposing
    def _now_ms(self) -> int:
        return int(self._clock())

    def _append(self, payload: bytes) -> int:
        """Make the entry durable; returns its index. The in-memory service just numbers it."""
        return self._sm.applied_index + 1

    def _after_apply(self) -> None:
        """Hook for durable services (periodic snapshots)."""

    def _propose(self, cmd):
        with self._lock:
            if self._closed:
                raise MetaClosedError("the meta-service is closed")
            # the proposer's clock, kept monotonic: log time never goes back
            t = max(self._now_ms(), self._last_time_ms)
            self._last_time_ms = t
            payload = encode_entry(t, cmd)
            index = self._append(payload)
            reply = self._sm.apply(index, t, cmd)
            self._after_apply()
            return reply

    # ------------------------------------------------------------------ writes
    def upsert(self, key: str, value, match_seq: MatchSeq = ANY, ttl_ms: Optional[int] = None,
               expire_at: Optional[int] = None) -> Tuple[Optional[SeqV], Optional[SeqV]]:
        """Write, delete (DELETE) or re-meta (AS_IS) one key if match_seq holds; returns (prev, result)."""
        return self._propose(UpsertCmd(key, value, check_match_seq(match_seq), make_spec(ttl_ms, expire_at)))

    def txn(self, conditions=(), if_then=(), else_then=(), branches=None, operations=None) -> TxnReply:
        """Run the first branch whose predicate holds, else if_then/else_then by the conditions."""
        if branches is not None and operations is not None:
            raise MetaInvalidArgument("give branches or operations (its alias), not both")
        br = branches if branches is not None else operations
        return self._propose(TxnCmd(conditions or (), if_then or (), else_then or (), br or ()))

    def apply_command(self, cmd):
        """Propose an already built command (UpsertCmd or TxnCmd): what the RPC server calls."""
        if not isinstance(cmd, (UpsertCmd, TxnCmd)):
            raise MetaInvalidArgument(f"not a command: {cmd!r}")
        return self._propose(cmd)

    # ------------------------------------------------------------------ reads (hide keys expired at local time)
    def _read(self, fn, *args):
        with self._lock:
            if self._closed:
                raise MetaClosedError("the meta-service is closed")
            return fn(*args, self._now_ms())

    def get(self, key: str) -> Optional[SeqV]:
        return self._read(self._sm.get, check_key(key))

    def mget(self, keys: Sequence[str]) -> List[Optional[SeqV]]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
            raise MetaInvalidArgument(f"keys must be a list of str, got {type(keys).__name__}")
        return self._read(self._sm.mget, [check_key(k) for k in keys])

    def list(self, prefix: str, limit: Optional[int] = None) -> List[Tuple[str, SeqV]]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise MetaInvalidArgument(f"limit must be None or an int >= 0, got {limit!r}")
        return self._read(self._sm.list, check_key(prefix, "prefix"), limit)

    @property
    def seq(self) -> int:
        """The last seq handed out."""
        with self._lock:
            return self._sm.seq

    @property
    def applied_index(self) -> int:
        with self._lock:
            return self._sm.applied_index

    # ------------------------------------------------------------------ watch
    def watch(self, key: str, key_end: Optional[str] = None, filter: str = "all",
              initial_flush: bool = False) -> Watcher:
        """Events for keys in [key, key_end) (key_end None: just `key`), from now on.

        With initial_flush, the live keys of the range come first (is_initialization=True), then
        FLUSH_MARKER. Registration and flush happen under the apply lock, so no change falls between.
        """
        check_key(key)
        if key_end is not None:
            check_key(key_end, "key_end")
        f = check_filter(filter)
        if not isinstance(initial_flush, bool):
            raise MetaInvalidArgument("initial_flush must be a bool")
        with self._lock:
            if self._closed:
                raise MetaClosedError("the meta-service is closed")
            w = Watcher(key, key_end, f, on_close=self._hub.remove)
            if initial_flush:
                for k, v in self._sm.range(key, key_end, self._now_ms()):
                    w.push(WatchEvent(k, None, v, True))
                w.push(FLUSH_MARKER)
            self._hub.add(w)
        return w

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._hub.close_all()

    def __enter__(self) -> "MetaService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


