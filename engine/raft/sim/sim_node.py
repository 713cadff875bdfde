"""SimNode: one simulated replica: a RawNode driven the way a real driver must drive it.

Inputs (messages, ticks, proposals, reads) queue in an inbox while the node's Ready is being
written; the Ready's messages and committed entries come out only when the disk finished it.
With bug="ack-before-sync" the driver instead advances (sends, applies, acknowledges) as soon
as a Ready is taken and lets the write land later: the mistake of etcd #14370, which the
checker must catch.
"""
from __future__ import annotations

import bisect

from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import MembershipRefused, ProposalDropped
from logtide.engine.raft.messages import ConfChange
from logtide.engine.raft.raft import Config
from logtide.engine.raft.raw_node import RawNode
from logtide.engine.raft.sim.disk import SimDisk, write_ready
from logtide.engine.raft.storage import MemoryStorage

COMPACT_EVERY = 24   # applied entries kept in the log before a snapshot + compaction
COMPACT_KEEP = 4     # entries left below the snapshot, so a slightly lagging follower needs none


class SimNode:
    def __init__(self, sim, node_id: int, durable: MemoryStorage, disk: SimDisk, tick_every: int) -> None:
        self.sim = sim
        self.id = node_id
        self.disk = disk
        self.tick_every = tick_every
        self.incarnation = 0
        self.up = False
        self.start()

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.incarnation += 1
        d = self.disk.durable
        self.live = d.copy()
        snap = d.snapshot()
        self.sm = self.sim.restore_state_machine(snap.data, snap.meta.index)
        self.sim.checker.on_restore(self.id, self.sm.index, self.sm.digest)
        cfg = Config(self.id, election_tick=self.sim.election_tick, heartbeat_tick=1, seed=self.sim.seed * 131 +
                     self.incarnation, max_size_per_msg=self.sim.max_msg_size, max_inflight=self.sim.max_inflight,
                     max_uncommitted_size=self.sim.max_uncommitted,
                     lazy_commit=self.sim.seed % 2 == 1)  # odd seeds: commits ride on the next APP or tick
        self.raw = RawNode(cfg, self.live, applied=self.sm.index)
        self.inbox: list = []
        self.ticks = 0
        self.writing = None      # the Ready whose write is in flight
        self.up = True
        self.proposals: dict[int, tuple[int, bytes]] = {}   # index -> (term, proposal id)
        self.reads: dict[bytes, int] = {}                     # read ctx -> max acked when issued

    def crash(self) -> None:
        if self.writing is not None:
            self.disk.torn(self.writing)
        self.writing = None
        self.up = False
        self.inbox = []
        self.proposals = {}
        self.reads = {}

    # --- inputs ----------------------------------------------------------------------------------

    def deliver(self, item) -> None:
        if self.up:
            self.inbox.append(item)
            self.run()

    def tick(self) -> None:
        if self.up:
            self.ticks += 1
            self.run()

    def run(self) -> None:
        """Feed queued inputs (unless a Ready is being written), then start the next write."""
        if not self.up or self.writing is not None:
            return
        raw = self.raw
        while self.ticks:
            self.ticks -= 1
            raw.tick()
            raw.flush_commit()  # lazy_commit: the longest linger a driver may choose is a tick
        inbox, self.inbox = self.inbox, []
        for item in inbox:
            if isinstance(item, M.Message):
                raw.step(item)
            else:
                self._client(item)
        r = raw.raft
        if r.state == M.LEADER:
            self.sim.checker.on_leader(self.id, r.term, r)
            self._note_commit()
        if raw.has_ready():
            rd = raw.ready()
            self.writing = rd
            for m in rd.send_now:  # the leader's appends go out while its own write is under way
                self.sim.send(m)
            if self.sim.bug == "ack-before-sync":
                self._land(rd)
                out = raw.advance(rd)
                self._note_commit()
                self._finish(out)  # acknowledges what is not durable yet
                self.sim.schedule(self.disk.write_time(rd) or 1, "disk", self.id, self.incarnation)
                return
            delay = self.disk.write_time(rd)
            if delay:
                self.sim.schedule(delay, "disk", self.id, self.incarnation)
            else:
                self.write_done(self.incarnation)

    def _client(self, item) -> None:
        kind = item[0]
        raw = self.raw
        try:
            if kind == "prop":
                pid = item[1]
                try:
                    index, term = raw.propose(pid)
                except ProposalDropped:
                    self.sim.note(pid, failed=True)
                    raise
                self.proposals[index] = (term, pid)
            elif kind == "read":
                ctx = item[1]
                self.reads[ctx] = self.sim.checker.max_acked
                raw.read_index(ctx)
            elif kind == "conf":
                raw.propose_conf_change(ConfChange(item[1], item[2]))
            elif kind == "transfer":
                raw.transfer_leader(item[1])
            elif kind == "snap_status":
                raw.report_snapshot(item[1], item[2])
        except (ProposalDropped, MembershipRefused):
            pass  # not the leader (any more), or a refused membership change: the client moves on

    def write_done(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation or self.writing is None:
            return  # the write belonged to a process that crashed
        rd, self.writing = self.writing, None
        if self.sim.bug == "ack-before-sync":
            if rd.must_sync:
                write_ready(self.disk.durable, rd)  # only now does the platter have it
            self.run()
            return
        self.disk.complete(self.live, rd)
        self._land(rd, live=False)
        out = self.raw.advance(rd)
        self._note_commit()
        self._finish(out)
        self.run()

    def _note_commit(self) -> None:
        """Tell the checker how far a leader committed (before anything it commits is applied)."""
        r = self.raw.raft
        if r.state == M.LEADER:
            self.sim.checker.on_leader_commit(r.term, r.log.committed)

    def _land(self, rd, live: bool = True) -> None:
        """rd reached the node's own log (and, for a snapshot, its state machine)."""
        if live:
            write_ready(self.live, rd)
            if rd.hard_state is not None:
                self.live.set_hard_state(rd.hard_state)
        if rd.entries:
            self.sim.checker.on_durable(self.id, rd.entries, self.live)
        if rd.snapshot is not None:
            self.sm = self.sim.restore_state_machine(rd.snapshot.data, rd.snapshot.meta.index)
            self.sim.checker.on_restore(self.id, self.sm.index, self.sm.digest)

    def _finish(self, out) -> None:
        sim = self.sim
        for m in out.messages:
            sim.send(m)
        if out.committed_entries:
            leaders = sim.leaders()
            checker = sim.checker
            for e in out.committed_entries:
                self.sm.apply(e)
                checker.on_apply(self.id, e, self.sm.digest, leaders)
                p = self.proposals.pop(e.index, None)
                if p is not None and p[0] == e.term and p[1] == e.data:
                    checker.on_ack(p[1], e.index)
                    sim.note(p[1], e.index)
                    sim.acks += 1
                    sim.acked_pid = max(sim.acked_pid, sim.proposal_number(p[1]))
            self._maybe_compact()
        for rs in out.read_states:
            before = self.reads.pop(rs.context, None)
            if before is not None:
                sim.checker.on_read(self.id, rs.index, before)
                sim.reads_done += 1
                if sim.record:
                    order = sim.checker.order
                    k = bisect.bisect_right(order, rs.index, key=lambda r: r[0])
                    sim.note(rs.context, tuple(order[:k]))

    def _maybe_compact(self) -> None:
        live = self.live
        idx = self.sm.index
        if idx - live.first_index() < COMPACT_EVERY or (self.writing is not None and self.sim.bug is None):
            return
        conf = self.raw.conf_at(idx)
        data = self.sm.save()
        snap = live.create_snapshot(idx, conf, data)
        live.compact(idx - COMPACT_KEEP)
        d = self.disk.durable
        if d.last_index() >= idx and d.snapshot().meta.index < idx:
            d.snap = snap
            d.compact(idx - COMPACT_KEEP)
            if self.writing is None:  # DiskStorage.create_snapshot rewrites its state file too
                d.set_hard_state(live.hard_state)
        self.raw.compacted()
        self.sim.snapshots += 1

