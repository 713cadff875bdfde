"""Raft's safety properties, checked incrementally after every simulator step.

- election safety: at most one leader per term;
- log matching: an (index, term) names one entry, whose predecessor has one term, so two logs
  that share an (index, term) share the whole prefix (checked on every entry made durable);
- leader completeness: an entry committed in term T (by the leader of T) is in the log of every
  leader of a later term (checked when a node becomes leader, and for the current leaders whenever
  a new entry is applied). The term that counts is the one in which the entry was committed, not
  the entry's own: an entry of term 2 that only the leader of term 5 commits need not be held by a
  leader of term 4 (docs/raft.md, cause 1);
- state-machine safety: every replica applies the same entry and reaches the same digest at
  each index (snapshots included);
- acknowledged proposals survive: an acknowledged proposal is the entry applied at its index
  everywhere, and after healing every member applies past it;
- ReadIndex: a read issued after a write was acknowledged is served at an index covering it.
"""
from __future__ import annotations

from logtide.engine.raft.errors import CompactedError, SafetyViolation, UnavailableError


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}                       # term -> leader id
        self.entries: dict[tuple[int, int], tuple] = {}         # (index, term) -> (type, data, prev term)
        self.applied: dict[int, tuple[int, bytes]] = {}         # index -> (term, data)
        self.digests: dict[int, int] = {}                       # index -> state machine digest
        self.acked: dict[bytes, int] = {}                       # proposal -> index
        self.max_acked = 0
        self.checks = 0
        self.order: list[tuple[int, bytes]] = []               # (index, data) of normal entries, in log order
        self.commit_terms: dict[int, int] = {}                  # index -> term of the leader that committed it
        self.commit_known = 0                                   # commit_terms holds 1..commit_known

    def fail(self, what: str) -> None:
        raise SafetyViolation(what)

    def on_leader(self, node_id: int, term: int, raft) -> None:
        known = self.leaders.get(term)
        if known is None:
            self.leaders[term] = node_id
            self._check_complete(node_id, raft)
        elif known != node_id:
            self.fail(f"election safety: nodes {known} and {node_id} are both leaders of term {term}")

    def on_leader_commit(self, term: int, committed: int) -> None:
        """The leader of `term` holds entries up to `committed` as committed: those it is the first
        to commit were committed in `term`."""
        if committed > self.commit_known:
            for i in range(self.commit_known + 1, committed + 1):
                self.commit_terms[i] = term
            self.commit_known = committed

    def commit_term(self, index: int, entry_term: int) -> int:
        # founding entries and snapshots' contents were committed before any leader was seen
        return self.commit_terms.get(index, entry_term)

    def _check_complete(self, node_id: int, raft) -> None:
        log = raft.log
        first, last = log.first_index(), log.last_index()
        for index, (term, _data) in self.applied.items():
            if self.commit_term(index, term) >= raft.term or index < first:
                continue
            if index > last or log.term_or_zero(index) != term:
                self.fail(f"leader completeness: leader {node_id} of term {raft.term} lacks committed entry "
                          f"{index} (term {term}); its log ends at {last}")
        self.checks += 1

    def on_durable(self, node_id: int, entries, storage) -> None:
        for e in entries:
            try:
                prev = storage.term(e.index - 1)
            except (CompactedError, UnavailableError):
                prev = -1
            key = (e.index, e.term)
            val = (e.type, e.data, prev)
            old = self.entries.get(key)
            if old is None:
                self.entries[key] = val
            elif old[0] != val[0] or old[1] != val[1] or (old[2] != val[2] and -1 not in (old[2], val[2])):
                self.fail(f"log matching: node {node_id} holds a different entry at index {e.index} term {e.term}")
        self.checks += 1

    def on_apply(self, node_id: int, e, digest: int, leaders) -> None:
        got = self.applied.get(e.index)
        if got is None:
            self.applied[e.index] = (e.term, e.data)
            if e.type == 0 and e.data:
                self.order.append((e.index, e.data))
            self.digests[e.index] = digest
            ct = self.commit_term(e.index, e.term)
            for lid, lraft in leaders:  # a newly known committed entry: every later-term leader has it
                if lraft.term > ct and e.index >= lraft.log.first_index() \
                        and lraft.log.term_or_zero(e.index) != e.term:
                    self.fail(f"leader completeness: leader {lid} of term {lraft.term} lacks entry {e.index} "
                              f"(term {e.term}) that node {node_id} applied")
        elif got != (e.term, e.data):
            self.fail(f"state-machine safety: node {node_id} applied a different entry at index {e.index} "
                      f"(term {e.term} vs {got[0]})")
        elif self.digests[e.index] != digest:
            self.fail(f"state-machine safety: node {node_id} reached another state at index {e.index}")
        self.checks += 1

    def on_restore(self, node_id: int, index: int, digest: int) -> None:
        want = self.digests.get(index)
        if want is not None and want != digest:
            self.fail(f"state-machine safety: node {node_id} restored a snapshot at {index} with another state")

    def on_ack(self, pid: bytes, index: int) -> None:
        if pid in self.acked:
            self.fail(f"proposal {pid!r} acknowledged twice")
        got = self.applied.get(index)
        if got is None or got[1] != pid:
            self.fail(f"acknowledged proposal {pid!r} is not the entry committed at index {index}")
        self.acked[pid] = index
        self.max_acked = max(self.max_acked, index)

    def on_read(self, node_id: int, read_index: int, acked_before: int) -> None:
        if read_index < acked_before:
            self.fail(f"ReadIndex: node {node_id} served a read at index {read_index}, below the write "
                      f"acknowledged at {acked_before} before the read began")

    def final(self, members_applied: dict[int, int], target: int) -> None:
        """After healing: every acknowledged proposal is still the entry at its index, and every
        member applied past `target` (all that was acknowledged when the heal goal was met)."""
        for pid, index in self.acked.items():
            if self.applied.get(index, (0, None))[1] != pid:
                self.fail(f"acknowledged proposal {pid!r} at index {index} was lost")
        for nid, applied in members_applied.items():
            if applied < target:
                self.fail(f"liveness: member {nid} applied only to {applied}, below acknowledged {target}")
