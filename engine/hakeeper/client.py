"""HAKeeperClient: a store's way to HAKeeper: register, heartbeat (the reply is the store's
schedule commands), status. It follows the leader across the replicas.

Every call has a deadline (`timeout`, each attempt at most `call_timeout`) and ends in a result or
a typed error: HAKeeper's own (MalformedCommandError, MalformedHeartbeatError, UnknownStoreError)
at once, HAKeeperUnavailable when no replica took the call in time. A refusal naming the leader
(HAKeeperNotLeader) sends the call there next; a replica that does not answer sends it to the next
one. A heartbeat whose first attempt committed but whose reply was lost is sent again: its
commands stay in flight at HAKeeper and are issued again when they expire, so nothing is lost
for good (at worst delayed by the command timeout).
"""
from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from logtide.engine.hakeeper import hakeeper_pb2 as pb
from logtide.engine.hakeeper.command import OperatorSchedule, RegisterStore, encode_command
from logtide.engine.hakeeper.hakeeper_service import HAKEEPER_SERVICE
from logtide.engine.hakeeper.heartbeat import Heartbeat
from logtide.engine.hakeeper.propose_result import decode_result
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.engine.rpc import connect
from logtide.errors import (HAKeeperError, HAKeeperNotLeader, HAKeeperUnavailable, InvalidArgument,
                            PeerTimeoutError, RpcError)

TIMEOUT = 3.0         # a whole call, across replicas
CALL_TIMEOUT = 1.0    # one attempt on one replica
_LEADER_AT = re.compile(r"leader at (\S+?)\)")


def parse_addresses(text: str) -> list[str]:
    """"H:P,H:P" or "1=H:P,2=H:P" -> the addresses, in order."""
    out = [p.strip().partition("=")[2] if "=" in p else p.strip() for p in text.split(",") if p.strip()]
    if not out or any(":" not in a for a in out):
        raise InvalidArgument(f"HAKeeper addresses: expected H:P[,H:P...] (or ID=H:P,...), got {text!r}")
    return out


class HAKeeperClient:
    def __init__(self, addresses: str | list[str], *, timeout: float = TIMEOUT,
                 call_timeout: float = CALL_TIMEOUT) -> None:
        self.addresses = parse_addresses(addresses) if isinstance(addresses, str) else list(addresses)
        self.timeout, self.call_timeout = timeout, call_timeout
        self._leader = self.addresses[0]
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    # --- the API --------------------------------------------------------------------------------

    def register(self, role: StoreRole, store_id: str, address: str = "") -> int:
        """Register (or re-register) a store; returns the tick it was registered at."""
        return self.propose(encode_command(RegisterStore(StoreRole(role), store_id, address)))

    def heartbeat(self, hb: Heartbeat) -> list[ScheduleCommand]:
        """Send one heartbeat; returns the schedule commands HAKeeper queued for this store."""
        return list(self.propose(encode_command(hb)))

    def schedule(self, commands: list[ScheduleCommand], timeout_ticks: int) -> int:
        """Queue schedule commands as an operator (OperatorSchedule); the number taken (one already
        in flight is not taken again). A command for an unknown store or replica is refused, typed."""
        return self.propose(encode_command(OperatorSchedule(timeout_ticks, tuple(commands))))

    def propose(self, command: bytes) -> Any:
        """Any store command's bytes (malformed ones too: HAKeeper refuses them with a typed error)."""
        rep = self._call("Propose", pb.ProposeRequest(command=command))
        return decode_result(rep.result)

    def status(self) -> dict:
        """HAKeeper's status from the leader, read after a ReadIndex barrier (its applied state: tick,
        stores, shards, commands): linearizable, never a follower's or a lagging new leader's."""
        rep = self._call("Status", pb.StatusRequest(), leader_only=True)
        return json.loads(rep.json)

    def replica_status(self, addr: str) -> dict:
        """One replica's own status (its applied state, stale on a follower), not following the leader."""
        try:
            rep = self._client(addr).invoke("Status", pb.StatusRequest(), timeout=self.call_timeout)
        except (RpcError, PeerTimeoutError, OSError) as exc:
            self._drop(addr)
            raise HAKeeperUnavailable(f"HAKeeper replica {addr}: {type(exc).__name__}: {exc}") from None
        return json.loads(rep.json)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, {}
        for c in clients.values():
            c.close()

    def __enter__(self) -> "HAKeeperClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- following the leader --------------------------------------------------------------------

    def _client(self, addr: str) -> Any:
        with self._lock:
            c = self._clients.get(addr)
            if c is None:
                c = self._clients[addr] = connect(HAKEEPER_SERVICE, addr, carrier="wire",
                                                  connect_timeout=self.call_timeout, timeout=self.call_timeout)
            return c

    def _drop(self, addr: str) -> None:
        with self._lock:
            c = self._clients.pop(addr, None)
        if c is not None:
            c.close()

    def _call(self, name: str, req: Any, leader_only: bool = False) -> Any:
        end = time.monotonic() + self.timeout
        addr, tried, last = self._leader, 0, None
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise HAKeeperUnavailable(f"HAKeeper {name}: no replica of {self.addresses} took the call within "
                                          f"{self.timeout:g} s (last: {type(last).__name__}: {last})")
            try:
                rep = self._client(addr).invoke(name, req, timeout=min(self.call_timeout, left))
                if leader_only and rep.leader != addr:
                    # a follower's status is stale: ask the leader it names; none named: an
                    # election, so give it a moment and ask the next replica
                    if not rep.leader:
                        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
                    addr = rep.leader or self._next(addr)
                    continue
                self._leader = addr
                return rep
            except HAKeeperNotLeader as exc:
                last = exc
                m = _LEADER_AT.search(str(exc))
                nxt = m.group(1) if m else None
                addr = nxt if nxt and nxt != addr else self._next(addr)
                if not nxt:
                    time.sleep(min(0.05, max(0.0, end - time.monotonic())))   # an election: give it a moment
            except HAKeeperError:
                raise    # HAKeeper's verdict on the command: typed, final
            except (RpcError, PeerTimeoutError, OSError) as exc:   # that replica did not answer
                last = exc
                self._drop(addr)
                addr = self._next(addr)
                tried += 1
                if tried % len(self.addresses) == 0:
                    time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def _next(self, addr: str) -> str:
        i = self.addresses.index(addr) if addr in self.addresses else -1
        return self.addresses[(i + 1) % len(self.addresses)]
