"""Forwarder: a follower hands a request that needs the leader to the leader (the seed's Forward).

One hop only: the leader serves the forwarded request itself or refuses it (MetaForwardRefused);
it never forwards it on. The forward carries what is left of the caller's deadline, and waits no
longer than that, nor past the moment this replica learns that the leader it forwarded to is no
longer the leader (a stopped or cut-off leader must not hold the caller, and the pipelined calls
behind it on the same connection, until the deadline). Transport failures and a replaced leader
become MetaUnavailableError for a write (its outcome is unknown: the old leader may have applied
it) and MetaNotLeader for a read (sent again); typed errors from the leader pass through unchanged.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Dict, List, Tuple

from logtide.engine.meta import grpc_format as G
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.rpc import RpcClient, connect
from logtide.errors import (DeadlineExceededError, MetaDeadlineExceeded, MetaError, MetaNotLeader,
                            MetaUnavailableError, MessageTooLarge, RpcError)

FORWARD_WORKERS = 64   # forwards of one pipelined batch run side by side (each waits for the leader's commit)
LEADER_CHECK_S = 0.05  # how often a waiting forward checks that its leader still leads
WRITES = ("Upsert", "Txn", "ChangeMember")


class Forwarder:
    """Forward calls from one replica to the leader it knows, over a framed connection per leader (calls of many threads share its frames)."""

    def __init__(self, replica) -> None:
        self.replica = replica
        self._clients: Dict[str, RpcClient] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=FORWARD_WORKERS, thread_name_prefix="meta-forward")
        # the calls themselves: one given up on (its leader replaced) runs out its deadline here
        self._calls = ThreadPoolExecutor(max_workers=2 * FORWARD_WORKERS, thread_name_prefix="meta-forward-call")
        self.forwarded = 0

    def _client(self, addr: str) -> RpcClient:
        from logtide.engine.meta.replica_server import META_FORWARD
        with self._lock:
            c = self._clients.get(addr)
            if c is None:
                c = connect(META_FORWARD, addr, carrier="wire", max_message_size=G.MAX_MESSAGE_BYTES,
                            timeout=self.replica.request_timeout, connect_timeout=2.0)
                self._clients[addr] = c
            return c

    def forward(self, method: str, request: Any, response_type: type, timeout: float) -> Any:
        """The leader's reply to `method(request)`: a `response_type` message."""
        r = self.replica
        lead = r.wait_leader(timeout)
        if lead == r.id:   # became the leader meanwhile: the caller serves it
            raise MetaNotLeader(f"replica {r.id} became the leader while forwarding; send again")
        addr = r.address_of(lead)
        if not addr:
            raise MetaNotLeader(f"replica {r.id} knows leader {lead} but not its address")
        req = pb.ForwardRequest(method=method, request=request.SerializeToString(), from_id=r.id,
                                timeout_ms=max(1, int(timeout * 1000)))
        try:
            rep = self._await(self._calls.submit(self._client(addr).invoke, "Forward", req, timeout=timeout),
                              method, lead, addr)
        except (MetaError, MessageTooLarge):
            raise
        except DeadlineExceededError as exc:
            raise MetaDeadlineExceeded(f"forwarding {method} to leader {lead} at {addr}: {exc}") from None
        except RpcError as exc:
            raise MetaUnavailableError(f"forwarding {method} to leader {lead} at {addr}: {exc}") from None
        self.forwarded += 1
        return response_type.FromString(rep.reply)

    def _await(self, fut, method: str, lead: int, addr: str):
        """The call's result, unless this replica learns first that `lead` no longer leads."""
        while True:
            try:
                return fut.result(timeout=LEADER_CHECK_S)
            except FutureTimeout:
                if self.replica.node.leader == lead:
                    continue
            fut.add_done_callback(lambda f: f.exception())   # its late outcome is nobody's
            what = f"leader {lead} at {addr} was replaced while {method} was forwarded to it"
            if method in WRITES:
                raise MetaUnavailableError(f"{what}: its outcome is unknown (it may still commit)")
            raise MetaNotLeader(f"{what}; send again")

    def forward_many(self, calls: List[Tuple[str, Any, type]], timeout: float) -> list:
        """forward() of several calls side by side; each item is its reply or its error."""
        def one(c):
            try:
                return self.forward(c[0], c[1], c[2], timeout)
            except Exception as exc:  # noqa: BLE001 - that call's result
                return exc
        if len(calls) == 1:
            return [one(calls[0])]
        return list(self._pool.map(one, calls))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._calls.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients.clear()
