"""Raft: the consensus state machine of one node (pure: messages and ticks in, messages out).

Roles follow the Raft paper and thesis, with etcd's refinements: pre-vote (§9.6), check-quorum
and the leader lease on votes, ReadIndex (§6.4), leadership transfer (§3.10), single-server
membership changes with learners (§4.1: a configuration takes effect when its entry is appended
to the log, and a leader proposes one only after committing an entry of its own term and when no
other change is uncommitted), and snapshots.

Messages it produces are queued in `msgs`; RawNode hands them out only after the state they
depend on was persisted (see raw_node.py).
"""
from __future__ import annotations

import random

from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import (CompactedError, DivergedLog, MalformedMessage, MembershipRefused, NotLeader,
                                        ProposalDropped, UnavailableError)
from logtide.engine.raft.messages import ConfChange, ConfState, Entry, HardState, Message, ReadState, Snapshot
from logtide.engine.raft.progress import PROBE, REPLICATE, SNAPSHOT, Progress
from logtide.engine.raft.quorum import VOTE_LOST, VOTE_WON, committed_index, has_quorum, vote_result
from logtide.engine.raft.raft_log import RaftLog
from logtide.engine.raft.read_only import ReadOnly
from logtide.engine.raft.uncommitted import UncommittedTail

FOLLOWER, PRE_CANDIDATE, CANDIDATE, LEADER = M.FOLLOWER, M.PRE_CANDIDATE, M.CANDIDATE, M.LEADER


class Config:
    """Knobs of one node. Ticks are the driver's unit of time (the service ticks every 100 ms).

    election_tick: a follower that hears no leader for a random time in [election_tick,
    2*election_tick) ticks campaigns; heartbeat_tick: the leader's heartbeat interval.
    max_size_per_msg bounds the bytes of one APP (batching), max_inflight the APPs in flight to
    one follower (flow control). seed makes the randomized timeouts deterministic.
    lazy_commit: a commit advance alone sends no APP at once; the followers learn the new commit
    from the next APP that carries entries, from the heartbeat, or when the driver calls
    flush_commit() (under load the next APP is moments away: one message round per commit saved).
    max_uncommitted_size bounds the payload bytes of a leader's uncommitted tail: past it,
    proposals are refused with ProposalDropped until entries commit (0: no bound). A leader that
    cannot commit (a slow or missing quorum) otherwise grows its log without end, and its followers
    never catch up with it (docs/raft.md, cause 3).
    """

    def __init__(self, id: int, election_tick: int = 10, heartbeat_tick: int = 1, pre_vote: bool = True,
                 check_quorum: bool = True, max_size_per_msg: int = 1 << 20, max_inflight: int = 256,
                 seed: int = 0, max_apply_size: int = 64 << 20, lazy_commit: bool = False,
                 max_uncommitted_size: int = 64 << 20) -> None:
        if not isinstance(id, int) or id <= 0:
            raise MalformedMessage(f"node id must be a positive int, got {id!r}")
        if heartbeat_tick <= 0 or election_tick <= heartbeat_tick:
            raise MalformedMessage(f"need 0 < heartbeat_tick < election_tick, got {heartbeat_tick}, {election_tick}")
        self.id = id
        self.election_tick = election_tick
        self.heartbeat_tick = heartbeat_tick
        self.pre_vote = pre_vote
        self.check_quorum = check_quorum
        self.max_size_per_msg = max_size_per_msg
        self.max_inflight = max_inflight
        self.seed = seed
        self.max_apply_size = max_apply_size
        self.lazy_commit = lazy_commit
        self.max_uncommitted_size = max_uncommitted_size


class Raft:
    def __init__(self, cfg: Config, storage, applied: int | None = None) -> None:
        self.id = cfg.id
        self.cfg = cfg
        self.log = RaftLog(storage, cfg.max_apply_size)
        self.rand = random.Random(cfg.seed * 1_000_003 + cfg.id)
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.prs: dict[int, Progress] = {}
        self.conf = ConfState()
        self.votes: dict[int, bool] = {}
        self.read_only = ReadOnly()
        self.pending_reads: list[Message] = []
        self.bcast_pending = False
        self.commit_unsent = False  # lazy_commit: the commit advanced since the last broadcast APP
        self.uncommitted = UncommittedTail()  # a leader's payload bytes above its commit index
        self.lead_transferee = 0
        self.heartbeat_elapsed = 0
        self.election_elapsed = 0
        self.randomized_election_timeout = cfg.election_tick
        self.state = FOLLOWER
        self.lead = 0

        hs, base_conf = storage.initial_state()
        last = self.log.last_index()
        self.membership = [(storage.first_index() - 1, base_conf)]  # (index, conf) of each change
        self._note_conf_entries(storage.conf_entries())
        self.term = hs.term
        self.vote = hs.vote
        if self.log.last_term() > self.term:  # never run a term below an entry we hold
            self.term, self.vote = self.log.last_term(), 0
        self.log.committed = max(self.log.committed, min(hs.commit, last))
        if applied is not None:
            # the state machine applied this far (e.g. its snapshot), so it is committed
            applied = min(applied, last)
            self.log.committed = max(self.log.committed, applied)
            self.log.applied = max(self.log.applied, applied)
        self._set_conf(self.membership[-1][1])
        self.become_follower(self.term, 0)

    # --- helpers ---------------------------------------------------------------------------------

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def promotable(self) -> bool:
        return self.id in self.conf.voters

    def send(self, m: Message) -> None:
        """Queue a message. Vote messages carry the term their sender set; requests forwarded to the
        leader (READ_INDEX, TRANSFER_LEADER) stay local (term 0); everything else gets our term."""
        if m.frm == 0:
            m.frm = self.id
        t = m.type
        if t == M.READ_INDEX or t == M.TRANSFER_LEADER:
            m.term = 0
        elif t != M.VOTE and t != M.PRE_VOTE and t != M.VOTE_RESP and t != M.PRE_VOTE_RESP:
            m.term = self.term
        self.msgs.append(m)

    def _set_conf(self, conf: ConfState) -> None:
        """Make `conf` the membership in use: progress for new members, none for removed ones."""
        self.conf = conf
        members = conf.members()
        for i in list(self.prs):
            if i not in members:
                del self.prs[i]
                if self.lead_transferee == i:
                    self.lead_transferee = 0
        nxt = self.log.last_index() + 1
        for i in members:
            pr = self.prs.get(i)
            if pr is None:
                pr = self.prs[i] = Progress(nxt, self.cfg.max_inflight, i in conf.learners)
                if i == self.id:
                    pr.match = self.log.stable_last_index()
                    pr.recent_active = True
            pr.is_learner = i in conf.learners

    def conf_at(self, index: int) -> ConfState:
        """The membership in force at log index `index` (for a snapshot taken there)."""
        conf = self.membership[0][1]
        for i, c in self.membership:
            if i > index:
                break
            conf = c
        return conf

    def _note_conf_entries(self, ents: list[Entry]) -> None:
        for e in ents:
            if e.type == M.ENTRY_CONF:
                try:
                    cc = ConfChange.decode(e.data)
                except MalformedMessage:
                    continue  # every replica skips the same bytes the same way
                conf = cc.apply(self.membership[-1][1])
                self.membership.append((e.index, conf))
                self._set_conf(conf)

    def _truncate_conf_history(self, from_index: int) -> None:
        """Entries from `from_index` on are being replaced: forget the changes they carried."""
        if self.membership[-1][0] >= from_index:
            keep = [(i, c) for i, c in self.membership if i < from_index]
            self.membership = keep or [self.membership[0]]
            self._set_conf(self.membership[-1][1])

    def prune_membership(self, first_index: int) -> None:
        """Forget changes below the compaction point (keep the one in force there)."""
        h = self.membership
        k = 0
        while k + 1 < len(h) and h[k + 1][0] < first_index:
            k += 1
        if k:
            self.membership = h[k:]

    def committed_in_term(self) -> bool:
        return self.log.term_or_zero(self.log.committed) == self.term

    # --- role changes ----------------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = 0
        self.lead = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.cfg.election_tick + self.rand.randrange(self.cfg.election_tick)
        self.lead_transferee = 0
        self.votes = {}
        self.read_only.reset()
        self.pending_reads = []
        self.bcast_pending = False
        self.commit_unsent = False
        nxt = self.log.last_index() + 1
        for i, pr in self.prs.items():
            learner = pr.is_learner
            pr.__init__(nxt, self.cfg.max_inflight, learner)
            if i == self.id:
                pr.match = self.log.stable_last_index()
                pr.recent_active = True

    def _retry_soon(self, elapsed: int = 0) -> None:
        """A (pre-)vote was refused after a full election timeout without a leader: typically a split
        vote (two followers timed out within one round trip and each voted for itself), or a pre-vote
        refused by a follower whose leader lease had a moment left. The next attempt comes after a
        random 0.5-1x election timeout from now instead of the rest of 1-2x, so either costs less.
        Random, so two candidates' retries still spread apart; a pre-vote changes no term."""
        half = max(1, self.cfg.election_tick // 2)
        self.randomized_election_timeout = min(self.randomized_election_timeout,
                                               elapsed + half + self.rand.randrange(half))

    def become_follower(self, term: int, lead: int) -> None:
        self._reset(term)
        self.state = FOLLOWER
        self.lead = lead

    def become_pre_candidate(self) -> None:
        # a pre-candidate changes neither term nor vote
        self.state = PRE_CANDIDATE
        self.votes = {}
        self.lead = 0

    def become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.state = CANDIDATE

    def become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self.state = LEADER
        for pr in self.prs.values():
            pr.recent_active = True  # every follower gets an election timeout to answer first
        self.prs[self.id].become_replicate()
        self.prs[self.id].match = self.log.stable_last_index()
        # the tail inherited from earlier terms counts against the bound until it commits
        self.uncommitted.reset()
        log = self.log
        if log.last_index() > log.committed:
            self.uncommitted.add(log.slice(log.committed + 1, log.last_index() + 1))
        # the no-op that commits the entries of earlier terms (§5.4.2)
        self._append([Entry(0, 0)])

    # --- ticks -----------------------------------------------------------------------------------

    def tick(self) -> None:
        if self.state == LEADER:
            self._tick_heartbeat()
        else:
            self.election_elapsed += 1
            if self.election_elapsed >= self.randomized_election_timeout and self.promotable():
                self.election_elapsed = 0
                self.step(Message(M.HUP, frm=self.id))

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                active = {i for i, pr in self.prs.items() if pr.recent_active or i == self.id}
                if not has_quorum(self.conf.voters, active):
                    self.become_follower(self.term, 0)  # we lost touch with a majority: step down
                    return
                for i, pr in self.prs.items():
                    if i != self.id:
                        pr.recent_active = False
            self.lead_transferee = 0  # a transfer that did not finish within an election timeout
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self.bcast_heartbeat()

    # --- elections -------------------------------------------------------------------------------

    def campaign(self, pre: bool, transfer: bool = False) -> None:
        if not self.promotable():
            return
        if pre:
            self.become_pre_candidate()
            vote_type, term = M.PRE_VOTE, self.term + 1
        else:
            self.become_candidate()
            vote_type, term = M.VOTE, self.term
        if self._poll(self.id, True) == VOTE_WON:  # a single voter
            if pre:
                self.campaign(False, transfer)
            else:
                self.become_leader()
            return
        last, last_term = self.log.last_index(), self.log.last_term()
        ctx = M.CAMPAIGN_TRANSFER if transfer else b""
        for v in sorted(self.conf.voters):
            if v != self.id:
                self.send(Message(vote_type, to=v, term=term, index=last, log_term=last_term, context=ctx))

    def _poll(self, frm: int, granted: bool) -> int:
        self.votes.setdefault(frm, granted)
        return vote_result(self.conf.voters, self.votes)

    # --- step ------------------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        t = m.type
        if m.term == 0:
            pass  # local message
        elif m.term > self.term:
            if t == M.VOTE or t == M.PRE_VOTE:
                force = m.context == M.CAMPAIGN_TRANSFER
                in_lease = (self.cfg.check_quorum and self.lead != 0
                            and self.election_elapsed < self.cfg.election_tick)
                if not force and in_lease:
                    return  # we heard from a live leader recently: a disruptive candidate is ignored
            if t == M.PRE_VOTE or (t == M.PRE_VOTE_RESP and not m.reject):
                pass  # pre-votes never move terms
            elif t in (M.APP, M.HEARTBEAT, M.SNAP):
                self.become_follower(m.term, m.frm)
            else:
                self.become_follower(m.term, 0)
        elif m.term < self.term:
            if (self.cfg.check_quorum or self.cfg.pre_vote) and t in (M.HEARTBEAT, M.APP):
                # a stale leader (e.g. back from a partition) learns our term and steps down
                self.send(Message(M.APP_RESP, to=m.frm))
            elif t == M.PRE_VOTE:
                self.send(Message(M.PRE_VOTE_RESP, to=m.frm, term=self.term, reject=True))
            return

        if t == M.HUP:
            if self.state != LEADER:
                self.campaign(self.cfg.pre_vote)
        elif t == M.VOTE or t == M.PRE_VOTE:
            can_vote = (self.vote == m.frm or (self.vote == 0 and self.lead == 0)
                        or (t == M.PRE_VOTE and m.term > self.term))
            resp = M.VOTE_RESP if t == M.VOTE else M.PRE_VOTE_RESP
            if can_vote and self.log.is_up_to_date(m.index, m.log_term):
                # answer in the candidate's term: a granted pre-vote is for the term it will run in
                self.send(Message(resp, to=m.frm, term=m.term))
                if t == M.VOTE:
                    self.election_elapsed = 0
                    self.vote = m.frm
            else:
                self.send(Message(resp, to=m.frm, term=self.term, reject=True))
        elif self.state == LEADER:
            self._step_leader(m)
        elif self.state == FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # --- leader ----------------------------------------------------------------------------------

    def _append(self, ents: list[Entry]) -> int:
        last = self.log.last_index()
        for k, e in enumerate(ents):
            e.term = self.term
            e.index = last + 1 + k
        self.log.append(ents)
        self.uncommitted.add(ents)
        self._note_conf_entries(ents)
        self.bcast_pending = True
        return last + len(ents)

    def propose(self, ents: list[Entry]) -> int:
        """Append proposed entries on the leader; returns the last index. Raises ProposalDropped."""
        if self.state != LEADER:
            raise NotLeader(f"node {self.id} is not the leader (leader: {self.lead or 'unknown'})", self.lead)
        if self.id not in self.prs:
            raise ProposalDropped(f"node {self.id} was removed from the group")
        if self.lead_transferee:
            raise ProposalDropped(f"leadership is moving to node {self.lead_transferee}")
        limit = self.cfg.max_uncommitted_size
        if limit and self.uncommitted.size and self.uncommitted.size + sum(len(e.data) for e in ents) > limit:
            # an empty tail always takes one batch, so an entry larger than the bound still goes through
            raise ProposalDropped(f"{self.uncommitted.size} bytes are uncommitted (bound {limit}): "
                                  f"the leader cannot commit fast enough")
        for e in ents:
            if e.type == M.ENTRY_CONF:
                self._check_conf_change(e)
        return self._append(ents)

    def _check_conf_change(self, e: Entry) -> None:
        cc = ConfChange.decode(e.data)
        if not self.committed_in_term():
            raise ProposalDropped("a new leader changes membership only after committing an entry of its term")
        if self.membership[-1][0] > self.log.committed:
            raise ProposalDropped("another membership change is not committed yet (one at a time)")
        conf = self.conf
        if cc.op == M.ADD_LEARNER and cc.node_id in conf.members():
            raise MembershipRefused(f"node {cc.node_id} is already a member")
        if cc.op == M.ADD_VOTER and cc.node_id in conf.voters:
            raise MembershipRefused(f"node {cc.node_id} is already a voter")
        if cc.op == M.REMOVE:
            if cc.node_id not in conf.members():
                raise MembershipRefused(f"node {cc.node_id} is not a member")
            if conf.voters == {cc.node_id}:
                raise MembershipRefused("cannot remove the last voter")
        if cc.node_id == self.id and cc.op == M.REMOVE and len(conf.voters) == 1:
            raise MembershipRefused("cannot remove the last voter")

    def send_append(self, to: int, send_if_empty: bool = True) -> bool:
        pr = self.prs[to]
        if pr.is_paused():
            return False
        log = self.log
        try:
            prev_term = log.term(pr.next - 1)
            ents = log.entries_from(pr.next, self.cfg.max_size_per_msg)
        except CompactedError:
            return self._send_snapshot(to, pr)
        if not ents and not send_if_empty:
            return False
        self.send(Message(M.APP, to=to, index=pr.next - 1, log_term=prev_term, entries=ents, commit=log.committed))
        if ents:
            if pr.state == REPLICATE:
                last = ents[-1].index
                pr.next = last + 1
                pr.inflights.add(last)
            else:
                pr.probe_sent = True
        elif pr.state == PROBE:
            pr.probe_sent = True
        return True

    def _send_snapshot(self, to: int, pr: Progress) -> bool:
        if not pr.recent_active:
            return False
        snap: Snapshot = self.log.storage.snapshot()
        if snap.is_empty():
            raise UnavailableError("the log is compacted but storage holds no snapshot")
        pr.become_snapshot(snap.meta.index)
        self.send(Message(M.SNAP, to=to, snapshot=snap))
        return True

    def bcast_append(self) -> None:
        self.commit_unsent = False  # every APP carries the commit index
        for i in self.prs:
            if i != self.id:
                self.send_append(i)

    def flush(self) -> None:
        """Send the appends that proposals and commit advances asked for, one per follower."""
        if self.bcast_pending:
            self.bcast_pending = False
            if self.state == LEADER:
                self.bcast_append()

    def _commit_advanced(self) -> None:
        """Tell the followers of a new commit index: now, or (lazy_commit) with the next APP."""
        if self.cfg.lazy_commit:
            self.commit_unsent = True
        else:
            self.bcast_pending = True

    def flush_commit(self) -> None:
        """lazy_commit: send the commit index that no APP carried yet (the driver's linger ended)."""
        if self.commit_unsent:
            self.commit_unsent = False
            if self.state == LEADER:
                self.bcast_pending = True

    def bcast_heartbeat(self, ctx: bytes | None = None) -> None:
        if ctx is None:
            ctx = self.read_only.last_pending_context() or b""
        for i, pr in self.prs.items():
            if i != self.id:
                self.send(Message(M.HEARTBEAT, to=i, commit=min(pr.match, self.log.committed), context=ctx))

    def maybe_commit(self) -> bool:
        voters = self.conf.voters
        prs = self.prs
        mci = committed_index(voters, lambda v: prs[v].match if v in prs else 0)
        if not self.log.maybe_commit(mci, self.term):
            return False
        self.uncommitted.committed_to(mci)
        if self.pending_reads and self.committed_in_term():
            reads, self.pending_reads = self.pending_reads, []
            for req in reads:
                self._leader_read_index(req)
        if self.id not in voters and self.membership[-1][0] <= self.log.committed:
            self.become_follower(self.term, 0)  # our removal is committed: stand down (§4.2.2)
        return True

    def own_persisted(self) -> None:
        """The driver persisted our log: the leader's own match counts toward commit now."""
        if self.state != LEADER:
            return
        pr = self.prs.get(self.id)
        if pr is not None and pr.maybe_update(self.log.stable_last_index()):
            if self.maybe_commit():
                self._commit_advanced()
        elif pr is None and self.maybe_commit():
            self._commit_advanced()

    def _leader_read_index(self, m: Message) -> None:
        if self.conf.voters <= {self.id}:
            self._answer_read(m, self.log.committed)
        elif not self.committed_in_term():
            self.pending_reads.append(m)  # until our no-op commits we do not know the commit index
        else:
            self.read_only.add_request(self.log.committed, m, self.id)
            self.bcast_heartbeat(m.context)

    def _answer_read(self, req: Message, index: int) -> None:
        if req.frm in (0, self.id):
            self.read_states.append(ReadState(index, req.context))
        else:
            self.send(Message(M.READ_INDEX_RESP, to=req.frm, index=index, context=req.context))

    def _step_leader(self, m: Message) -> None:
        t = m.type
        if t == M.BEAT:
            self.bcast_heartbeat()
            return
        if t == M.READ_INDEX:
            self._leader_read_index(m)
            return
        if t == M.PROP:
            self.propose(m.entries)
            return
        pr = self.prs.get(m.frm)
        if pr is None:
            return  # not (or no longer) a member
        if t == M.APP_RESP:
            pr.recent_active = True
            if m.reject:
                hint = m.reject_hint
                if m.log_term > 0:
                    hint = self.log.find_conflict_by_term(hint, m.log_term)[0]
                if pr.maybe_decr_to(m.index, hint):
                    if pr.state == REPLICATE:
                        pr.become_probe()
                    self.send_append(m.frm)
                return
            old_paused = pr.is_paused()
            if pr.maybe_update(m.index):
                if pr.state == PROBE:
                    pr.become_replicate()
                elif pr.state == SNAPSHOT and pr.match >= pr.pending_snapshot:
                    pr.become_probe()
                    pr.become_replicate()
                elif pr.state == REPLICATE:
                    pr.inflights.free_le(m.index)
                committed = self.maybe_commit()
                if committed:
                    self._commit_advanced()
                    if self.state != LEADER:
                        return
                if old_paused and (not committed or self.cfg.lazy_commit):
                    self.send_append(m.frm)  # (an eager commit's broadcast covers it)
                while self.send_append(m.frm, send_if_empty=False):
                    pass
                if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                    self.send(Message(M.TIMEOUT_NOW, to=m.frm))
        elif t == M.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state == REPLICATE and pr.inflights.full():
                pr.inflights.free_first_one()
            if pr.match < self.log.last_index():
                self.send_append(m.frm)
            if m.context:
                acks = self.read_only.recv_ack(m.frm, m.context)
                if acks is not None and has_quorum(self.conf.voters, acks):
                    for rs in self.read_only.advance(m.context):
                        self._answer_read(rs.req, rs.index)
        elif t == M.SNAP_STATUS:
            if pr.state == SNAPSHOT:
                pr.become_probe()
                pr.probe_sent = True  # wait for the next heartbeat answer before probing again
        elif t == M.UNREACHABLE:
            if pr.state == REPLICATE:
                pr.become_probe()
        elif t == M.TRANSFER_LEADER:
            target = m.frm
            if pr.is_learner or target == self.id or target == self.lead_transferee:
                return
            self.lead_transferee = target
            self.election_elapsed = 0  # the transfer must finish within one election timeout
            if pr.match == self.log.last_index():
                self.send(Message(M.TIMEOUT_NOW, to=target))
            else:
                self.send_append(target)

    # --- candidate -------------------------------------------------------------------------------

    def _step_candidate(self, m: Message) -> None:
        t = m.type
        if t == M.PROP:
            raise NotLeader(f"node {self.id} is campaigning", 0)
        if t == M.APP:
            self.become_follower(m.term, m.frm)
            self._handle_append(m)
        elif t == M.HEARTBEAT:
            self.become_follower(m.term, m.frm)
            self._handle_heartbeat(m)
        elif t == M.SNAP:
            self.become_follower(m.term, m.frm)
            self._handle_snapshot(m)
        elif (t == M.PRE_VOTE_RESP and self.state == PRE_CANDIDATE) or (t == M.VOTE_RESP and self.state == CANDIDATE):
            res = self._poll(m.frm, not m.reject)
            if res == VOTE_WON:
                if self.state == PRE_CANDIDATE:
                    self.campaign(False, False)
                else:
                    self.become_leader()
            elif res == VOTE_LOST:
                split = self.state == CANDIDATE
                self.become_follower(self.term, 0)
                if split:
                    self._retry_soon()
            elif m.reject:
                self._retry_soon(self.election_elapsed)
        elif t == M.READ_INDEX:
            pass  # no leader to ask: the reader's deadline answers

    # --- follower --------------------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t == M.PROP:
            raise NotLeader(f"node {self.id} is a follower (leader: {self.lead or 'unknown'})", self.lead)
        if t == M.APP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif t == M.HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_heartbeat(m)
        elif t == M.SNAP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)
        elif t == M.TRANSFER_LEADER:
            if self.lead:
                self.send(Message(M.TRANSFER_LEADER, to=self.lead, frm=m.frm))  # frm names the transferee
        elif t == M.TIMEOUT_NOW:
            self.campaign(False, transfer=True)
        elif t == M.READ_INDEX:
            if self.lead:
                fwd = Message(M.READ_INDEX, to=self.lead, context=m.context)
                self.send(fwd)
        elif t == M.READ_INDEX_RESP:
            self.read_states.append(ReadState(m.index, m.context))

    def _handle_append(self, m: Message) -> None:
        log = self.log
        if m.index < log.committed:
            self.send(Message(M.APP_RESP, to=m.frm, index=log.committed))
            return
        if not log.match_term(m.index, m.log_term):
            if m.index == log.committed and m.index:    # (below it was answered above)
                raise DivergedLog(f"the leader {m.frm} has term {m.log_term} at index {m.index}, which this "
                                  f"replica committed with term {log.term(m.index)}")
            hint_index, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
            self.send(Message(M.APP_RESP, to=m.frm, index=m.index, reject=True, reject_hint=hint_index,
                              log_term=hint_term))
            return
        ents = m.entries
        last_new = m.index + len(ents)
        ci = log.find_conflict(ents)
        if ci:
            if ci <= log.committed:
                raise DivergedLog(f"the leader {m.frm}'s entry {ci} conflicts with the log this replica "
                                  f"committed up to {log.committed}")
            new = ents[ci - m.index - 1:]
            self._truncate_conf_history(ci)
            log.append(new)
            self._note_conf_entries(new)
        log.commit_to(min(m.commit, last_new))
        self.send(Message(M.APP_RESP, to=m.frm, index=last_new))

    def _handle_heartbeat(self, m: Message) -> None:
        self.log.commit_to(min(m.commit, self.log.last_index()))
        self.send(Message(M.HEARTBEAT_RESP, to=m.frm, context=m.context))

    def _handle_snapshot(self, m: Message) -> None:
        s = m.snapshot
        if s is None:
            raise MalformedMessage("SNAP without a snapshot")
        if self._restore(s):
            self.send(Message(M.APP_RESP, to=m.frm, index=self.log.last_index()))
        else:
            self.send(Message(M.APP_RESP, to=m.frm, index=self.log.committed))

    def _restore(self, s: Snapshot) -> bool:
        meta = s.meta
        if meta.index <= self.log.committed:
            return False
        if self.log.match_term(meta.index, meta.term):
            self.log.commit_to(meta.index)  # we already hold its entries
            return False
        self.log.restore(s)
        self.membership = [(meta.index, meta.conf)]
        self._set_conf(meta.conf)
        return True
