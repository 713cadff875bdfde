"""Membership changes of the meta-service's Raft group, run by its leader: add a learner, promote
a learner that has caught up, remove a member. Each is a Raft membership change (one at a time,
engine/raft) followed by the node record (AddNode / RemoveNode) that the state machine keeps apart
from Raft membership, so every replica knows each member's address and role.

Refused before anything is proposed (MetaMembershipRefused): a change after which the voters the
leader hears from are not a majority of the new voters; promoting a learner that is behind.
MetaUnknownMember: naming a node that is not a member. A change already done is not done again, so
a retried change finishes the node record. To remove the leader itself, it first hands the
leadership to the most caught-up voter that stays, and answers MetaNotLeader: the request is sent
again, to the new leader, which removes it.
"""
from __future__ import annotations

import threading
import time
from typing import Dict, Set

from logtide.engine.meta.node_info import (ROLE_LEARNER, ROLE_VOTER, AddNodeCmd, NodeInfo, RemoveNodeCmd,
                                           check_address, check_node_id)
from logtide.engine.raft import ADD_LEARNER, ADD_VOTER, REMOVE, ConfChange
from logtide.engine.raft.errors import MembershipRefused, NotLeader, ProposalDropped, RaftStopped, RaftTimeout
from logtide.errors import (MetaDeadlineExceeded, MetaInvalidArgument, MetaMembershipRefused, MetaUnavailableError,
                            MetaUnknownMember)

OPS = ("add_learner", "promote", "remove")
PROMOTE_MAX_LAG = 64    # a learner this many entries or fewer behind the leader's commit has caught up


def majority(n: int) -> int:
    return n // 2 + 1


class Membership:
    """The member changes of one replica (served only while it leads)."""

    def __init__(self, replica) -> None:
        self.r = replica
        self._lock = threading.Lock()   # one change at a time from this replica

    def change(self, op: str, node_id: int, address: str, timeout: float) -> None:
        """Run one change on this replica, which must lead (MetaNotLeader otherwise)."""
        if op not in OPS:
            raise MetaInvalidArgument(f"a membership change is one of {OPS}, got {op!r}")
        check_node_id(node_id)
        if op == "add_learner":
            check_address(address)
        end = time.monotonic() + timeout
        with self._lock:
            getattr(self, "_" + op)(node_id, address, end)

    def record_members(self, timeout: float) -> None:
        """On the leader: a node record for every member that has none (the founders, or a change
        whose record was lost with its leader), with the address this replica knows; existing
        records are left as they are (overriding=False)."""
        voters, learners = self._members()
        nodes = self._nodes()
        end = time.monotonic() + timeout
        for i in sorted(voters | learners):
            addr = self.r.address_of(i)
            if i not in nodes and addr:
                role = ROLE_VOTER if i in voters else ROLE_LEARNER
                with self._lock:
                    self._record(AddNodeCmd(NodeInfo(i, addr, role), overriding=False), end)

    # ------------------------------------------------------------------ the three changes
    def _add_learner(self, node_id: int, address: str, end: float) -> None:
        voters, learners = self._members()
        if node_id in voters:
            raise MetaMembershipRefused(f"node {node_id} is already a voter")
        if node_id not in learners:
            self._conf(ConfChange(ADD_LEARNER, node_id, address.encode()), end)
        self._record(AddNodeCmd(NodeInfo(node_id, address, ROLE_LEARNER)), end)

    def _promote(self, node_id: int, address: str, end: float) -> None:
        voters, learners = self._members()
        if node_id not in voters | learners:
            raise MetaUnknownMember(f"node {node_id} is not a member (members {sorted(voters | learners)})")
        if node_id in learners:
            self._wait_caught_up(node_id, end)
            self._check_quorum(voters | {node_id}, end)
            self._conf(ConfChange(ADD_VOTER, node_id), end)
        self._record(AddNodeCmd(NodeInfo(node_id, self._address(node_id), ROLE_VOTER)), end)

    def _remove(self, node_id: int, address: str, end: float) -> None:
        voters, learners = self._members()
        if node_id not in voters | learners:
            if node_id in self._nodes():     # a removal whose node record was left behind
                self._record(RemoveNodeCmd(node_id), end)
                return
            raise MetaUnknownMember(f"node {node_id} is not a member (members {sorted(voters | learners)})")
        if node_id in voters:
            self._check_quorum(voters - {node_id}, end)
        if node_id == self.r.id:
            self._step_aside(voters - {node_id}, end)
        self._conf(ConfChange(REMOVE, node_id), end)
        self._record(RemoveNodeCmd(node_id), end)

    # ------------------------------------------------------------------ checks
    def _members(self):
        c = self.r.node.conf()
        return set(c.voters), set(c.learners)

    def _nodes(self) -> Dict[int, NodeInfo]:
        with self.r.rsm.lock:
            return self.r.rsm.sm.nodes()

    def _address(self, node_id: int) -> str:
        n = self._nodes().get(node_id)
        return n.address if n is not None else self.r.address_of(node_id)

    def _progress(self) -> dict:
        st = self.r.node.status()
        if st.get("role") != "leader" or "progress" not in st:
            raise self.r.not_leader_error(NotLeader("not the leader", self.r.node.leader))
        return st

    def _check_quorum(self, new_voters: Set[int], end: float) -> None:
        """The voters this leader hears from are a majority of `new_voters`, within one election
        timeout (a follower's "recently active" mark is cleared at every check-quorum round)."""
        wait_end = min(end, time.monotonic() + 2 * self.r.election_tick * self.r.tick_interval)
        while True:
            prs = self._progress()["progress"]
            active = {i for i in new_voters if prs.get(i, {}).get("active")}
            if len(active) >= majority(len(new_voters)):
                return
            if time.monotonic() >= wait_end:
                raise MetaMembershipRefused(
                    f"the change would lose quorum: of the voters after it {sorted(new_voters)} the leader "
                    f"hears from {sorted(active)}, fewer than {majority(len(new_voters))}")
            time.sleep(0.02)

    def _wait_caught_up(self, node_id: int, end: float) -> None:
        """The learner is active and at most PROMOTE_MAX_LAG entries behind the commit index
        (waiting up to an election timeout for it)."""
        wait_end = min(end, time.monotonic() + 2 * self.r.election_tick * self.r.tick_interval)
        while True:
            st = self._progress()
            pr = st["progress"].get(node_id, {})
            lag = st["commit"] - pr.get("match", 0)
            if pr.get("active") and lag <= PROMOTE_MAX_LAG:
                return
            if time.monotonic() >= wait_end:
                raise MetaMembershipRefused(f"learner {node_id} has not caught up: {lag} entries behind the "
                                            f"commit index {st['commit']}"
                                            + ("" if pr.get("active") else ", and not answering"))
            time.sleep(0.02)

    def _step_aside(self, stay: Set[int], end: float) -> None:
        """Hand the leadership to the most caught-up active voter of `stay`, wait (up to two
        election timeouts) until this replica no longer leads, and answer MetaNotLeader."""
        prs = self._progress()["progress"]
        to = max((i for i in stay if prs.get(i, {}).get("active")), key=lambda i: prs[i]["match"])
        self.r.node.transfer_leader(to)
        wait_end = min(end, time.monotonic() + 2 * self.r.election_tick * self.r.tick_interval)
        while self.r.is_leader():
            if time.monotonic() >= wait_end:
                raise MetaMembershipRefused(f"node {self.r.id} leads and could not hand the leadership to "
                                            f"node {to} to remove itself; try again")
            time.sleep(0.02)
        raise self.r.not_leader_error(NotLeader(f"node {self.r.id} handed the leadership to node {to} "
                                                f"so that it can be removed; send again", to))

    # ------------------------------------------------------------------ proposing
    def _conf(self, cc: ConfChange, end: float) -> None:
        try:
            self.r.node.change_membership(cc, timeout=max(0.001, end - time.monotonic()))
        except NotLeader as exc:
            raise self.r.not_leader_error(exc) from None
        except MembershipRefused as exc:
            raise MetaMembershipRefused(str(exc)) from None
        except ProposalDropped as exc:   # one change at a time, or no entry of this term committed yet
            raise MetaMembershipRefused(f"{exc}; try again") from None
        except RaftTimeout as exc:
            raise MetaDeadlineExceeded(f"membership change {cc}: {exc} (it may still commit)") from None
        except RaftStopped as exc:
            raise MetaUnavailableError(f"membership change {cc}: {exc}") from None

    def _record(self, cmd, end: float) -> None:
        self.r.apply_command(cmd, max(0.001, end - time.monotonic()))
