"""Simulation: N Raft nodes over a seeded network, disk and clock, with faults, checked every step.

Everything random comes from one random.Random(seed), and events run in (time, sequence) order,
so a seed replays exactly. A run has a fault phase (drops, duplicates, reordering, delays,
symmetric and one-way partitions, crashes that lose unsynced writes, slow disks, drifting clocks,
leadership transfers, membership changes, snapshots) and then a heal phase: every fault stops
and, within a bounded number of ticks, a leader must commit a new proposal and every member must
apply past every acknowledged one.
"""
from __future__ import annotations

import heapq
import random

from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import SafetyViolation
from logtide.engine.raft.sim.checker import Checker
from logtide.engine.raft.sim.disk import DISK_BUGS, SimDisk
from logtide.engine.raft.sim.network import SimNetwork
from logtide.engine.raft.sim.sim_node import SimNode
from logtide.engine.raft.sim.state_machine import SimStateMachine
from logtide.engine.raft.storage import MemoryStorage

TICK = 10  # time units per tick of a node whose clock does not drift

# --bug switches: each drives the core or the disk the wrong way that a cause in docs/raft.md
# names, so that a known seed shows the checker catching that class of error
BUGS = {
    "ack-before-sync": "the driver advances (sends, applies, acknowledges) before its write is durable",
    "state-before-entries": "the disk writes the hard state, with its commit index, before the entries",
    "unbounded-uncommitted": "a leader takes proposals however far its commit index lags",
}


class SimResult:
    def __init__(self, sim: "Simulation", error: str | None) -> None:
        self.seed = sim.seed
        self.error = error
        self.steps = sim.steps
        self.ticks = sim.now // TICK
        self.acks = sim.acks
        self.reads = sim.reads_done
        self.elections = len(sim.checker.leaders)
        self.snapshots = sim.snapshots
        self.crashes = sim.crashes
        self.conf_changes = sim.conf_changes
        self.heal_ticks = sim.heal_ticks
        self.replay = sim.replay_command()

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return (f"SimResult(seed={self.seed}, {'ok' if self.ok else 'FAILED: ' + self.error}, steps={self.steps}, "
                f"acks={self.acks}, reads={self.reads}, leaders={self.elections}, crashes={self.crashes}, "
                f"snapshots={self.snapshots}, conf={self.conf_changes}, heal_ticks={self.heal_ticks})")


class Simulation:
    def __init__(self, seed: int, fault_ticks: int = 150, liveness_ticks: int = 200, bug: str | None = None,
                 voters: int | None = None, record: bool = False) -> None:
        self.seed = seed
        self.bug = bug
        self.fault_ticks = fault_ticks
        self.liveness_ticks = liveness_ticks
        rng = self.rng = random.Random(seed)
        self.n = voters or rng.choice((3, 3, 3, 5))
        self.election_tick = 10
        self.max_msg_size = rng.choice((64, 1024, 1 << 20)) * self.ENTRY_SCALE   # small limits force many batches
        self.max_inflight = rng.choice((1, 4, 256))
        # payload bytes a leader may hold uncommitted (entries here are ~6 bytes); drawn either way,
        # so that the bug switch keeps the seed's schedule. At most four full flow-control windows of
        # one follower: a larger backlog behind a slow pipe (64 B messages, one in flight) takes longer
        # to drain than the liveness check waits (docs/raft.md, cause 3)
        self.max_uncommitted = min(rng.choice((64, 256, 1024)) * self.ENTRY_SCALE,
                                   4 * self.max_msg_size * self.max_inflight)
        if bug == "unbounded-uncommitted":
            self.max_uncommitted = 0
        self.net = SimNetwork(rng, (1, rng.choice((2, 5, 15))), rng.choice((0.0, 0.02, 0.1, 0.3)),
                              rng.choice((0.0, 0.05, 0.2)))
        self.checker = Checker()
        self.queue: list = []
        self.seq = 0
        self.now = 0
        self.steps = self.acks = self.reads_done = self.snapshots = self.crashes = self.conf_changes = 0
        self.heal_ticks = -1
        self.pid = 0
        self.acked_pid = 0  # the highest proposal number acknowledged so far
        self.catch_up_to: int | None = None
        # the clients' history, for the linearizability checker: id -> [input, call, output, return]
        self.record = record
        self.history: dict[bytes, list] = {}
        self.removed: set[int] = set()
        founders = list(range(1, self.n + 1))
        self.spares = [self.n + 1, self.n + 2]
        self.nodes: dict[int, SimNode] = {}
        for i in founders + self.spares:
            st = MemoryStorage.bootstrap(founders) if i in founders else MemoryStorage()
            slow = rng.random() < 0.15
            disk = SimDisk(st, rng, (20, 60) if slow else (1, rng.choice((2, 4))),
                           bug if bug in DISK_BUGS else None)
            drift = rng.uniform(-0.25, 0.25) if rng.random() < 0.5 else 0.0
            tick_every = max(1, round(TICK * (1 + drift)))
            self.nodes[i] = SimNode(self, i, st, disk, tick_every)
            self.schedule(rng.randint(1, tick_every), "tick", i)

    # --- events ----------------------------------------------------------------------------------

    def schedule(self, delay: int, kind: str, a=None, b=None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.now + delay, self.seq, kind, a, b))

    def send(self, m: M.Message) -> None:
        delays = self.net.deliveries(m.frm, m.to)
        if m.type == M.SNAP:
            # snapshots travel on their own stream, whose end (or failure) the sender hears of
            ok = bool(delays)
            self.schedule((delays[0] if ok else self.net.latency[1]) + 1, "client", m.frm, ("snap_status", m.to, ok))
        for d in delays:
            self.schedule(d, "msg", m.to, m)

    def leaders(self):
        return [(i, n.raw.raft) for i, n in self.nodes.items() if n.up and n.raw.raft.state == M.LEADER]

    def leader(self) -> SimNode | None:
        best = None
        for n in self.nodes.values():
            if n.up and n.raw.raft.state == M.LEADER and (best is None or n.raw.raft.term > best.raw.raft.term):
                best = n
        return best

    def replay_command(self) -> str:
        extra = f" --bug {self.bug}" if self.bug else ""
        if self.fault_ticks != 150:
            extra += f" --fault-ticks {self.fault_ticks}"
        return f"python -m {self.REPLAY_MODULE} --seed {self.seed}{extra}"

    # --- what the replicas run: a subclass (HAKeeper's, engine/hakeeper/sim) runs its own ----------

    REPLAY_MODULE = "logtide.engine.raft.sim"
    ENTRY_SCALE = 1   # the byte bounds above are for ~6-byte entries; a workload of larger ones scales them

    def restore_state_machine(self, data: bytes, index: int):
        """A replica's state machine from snapshot bytes (b"" for none) at `index`."""
        return SimStateMachine.restore(data, index)

    def proposal(self, key: bytes) -> bytes:
        """The entry a client proposes; `key` (b"p<N>") is its unique id."""
        return key

    def proposal_number(self, data: bytes) -> int:
        """N of a proposed entry's key b"p<N>"."""
        return int(data[1:])

    # --- faults and clients --------------------------------------------------------------------------

    def _fault(self) -> None:
        rng = self.rng
        roll = rng.random()
        up = [n for n in self.nodes.values() if n.up and n.id not in self.spares_unused()]
        if roll < 0.3 and up:
            writing = [n for n in up if n.writing is not None]
            # crash in the middle of a write when one is under way: the worst moment for the disk
            victim = rng.choice(writing if writing and rng.random() < 0.6 else up)
            victim.crash()
            self.crashes += 1
            self.schedule(rng.randint(2, 40) * TICK, "restart", victim.id)
        elif roll < 0.45:
            ids = list(self.nodes)
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) - 1)
            self.net.partition(ids[:k], ids[k:], one_way=rng.random() < 0.3)
            self.schedule(rng.randint(5, 40) * TICK, "heal_net")
        elif roll < 0.55:
            lead = self.leader()
            if lead is not None:
                voters = sorted(lead.raw.raft.conf.voters - {lead.id})
                if voters:
                    lead.deliver(("transfer", rng.choice(voters)))
        elif roll < 0.70:
            self._conf_change()
        self.schedule(rng.randint(1, 15) * TICK, "fault")

    def spares_unused(self) -> set[int]:
        lead = self.leader()
        members = lead.raw.raft.conf.members() if lead else set()
        return {s for s in self.spares if s not in members}

    def _conf_change(self) -> None:
        lead = self.leader()
        if lead is None:
            return
        conf = lead.raw.raft.conf
        rng = self.rng
        if conf.learners:
            op = (M.ADD_VOTER, min(conf.learners))
        else:
            spare = [s for s in self.spares if s not in conf.members() and s not in self.removed]
            if spare and (len(conf.voters) <= 3 or rng.random() < 0.5):
                op = (M.ADD_LEARNER, spare[0])
            elif len(conf.voters) > 3:
                victim = rng.choice(sorted(conf.voters))
                self.removed.add(victim)
                op = (M.REMOVE, victim)
            else:
                return
        self.conf_changes += 1
        lead.deliver(("conf", op[0], op[1]))

    def _client(self, read: bool = False) -> None:
        target = self.leader()
        if target is None or self.rng.random() < 0.1:
            target = self.nodes[self.rng.choice(list(self.nodes))]
        self.pid += 1
        key = b"%s%d" % (b"r" if read else b"p", self.pid)
        if self.record:
            self.history[key] = [("read", 1) if read else ("append", key), self.now, None, None]
        target.deliver(("read", key) if read else ("prop", self.proposal(key)))

    # --- the run ---------------------------------------------------------------------------------

    def run(self) -> SimResult:
        try:
            self._run()
            return SimResult(self, None)
        except SafetyViolation as exc:
            return SimResult(self, str(exc))

    def _run(self) -> None:
        rng = self.rng
        self.schedule(rng.randint(1, 10) * TICK, "fault")
        self.schedule(TICK, "prop")
        self.schedule(3 * TICK, "read")
        fault_end = self.fault_ticks * TICK
        self.schedule(fault_end, "heal")
        healed_at = None
        deadline = fault_end + self.liveness_ticks * TICK
        goal = None
        nodes = self.nodes
        queue = self.queue
        while queue:
            t, _seq, kind, a, b = heapq.heappop(queue)
            self.now = t
            self.steps += 1
            if kind == "msg":
                nodes[a].deliver(b)
            elif kind == "tick":
                n = nodes[a]
                n.tick()
                self.schedule(n.tick_every, "tick", a)
            elif kind == "disk":
                nodes[a].write_done(b)
            elif kind == "client":
                nodes[a].deliver(b)
            elif kind == "prop":
                self._client()
                self.schedule(rng.randint(1, 3) * TICK, "prop")
            elif kind == "read":
                self._client(read=True)
                self.schedule(rng.randint(2, 8) * TICK, "read")
            elif kind == "fault":
                if healed_at is None:
                    self._fault()
            elif kind == "restart":
                if not nodes[a].up:
                    nodes[a].start()
            elif kind == "heal_net":
                if healed_at is None:
                    self.net.heal()
            elif kind == "heal":
                healed_at = t
                self.net.heal()
                self.net.p_drop = self.net.p_dup = 0.0
                for n in nodes.values():
                    if not n.up:
                        n.start()
                goal = self.pid + 1  # a proposal issued after healing must commit
            if healed_at is not None:
                lead = self.leader()
                if lead is not None and self._settled(lead, goal):
                    self.heal_ticks = (t - healed_at) // TICK
                    members = lead.raw.raft.conf.members()
                    self.checker.final({i: nodes[i].sm.index for i in members}, self.catch_up_to)
                    return
                if t > deadline:
                    lead_s = lead.raw.status() if lead else None
                    raise SafetyViolation(f"liveness: {self.liveness_ticks} ticks after healing no leader committed "
                                          f"a new proposal and caught every member up (leader: {lead_s})")

    def _settled(self, lead: SimNode, goal: int) -> bool:
        if self.acked_pid < goal:
            return False
        if self.catch_up_to is None:  # clients keep writing: members must reach what was acked by now
            self.catch_up_to = self.checker.max_acked
        return all(self.nodes[i].sm.index >= self.catch_up_to for i in lead.raw.raft.conf.members())


    def note(self, key: bytes, output=None, failed: bool = False) -> None:
        """A client call ended: with an output, or refused at once (it had no effect)."""
        if not self.record or key not in self.history:
            return
        if failed:
            del self.history[key]
        elif self.history[key][3] is None:
            self.history[key][2:] = [output, self.now]

    def operations(self) -> list:
        """The recorded history as lincheck Operations (calls never answered are timed out)."""
        from logtide.engine.raft.lincheck import INF, UNKNOWN, Operation
        out = []
        for k, (inp, call, output, ret) in self.history.items():
            out.append(Operation(0, inp, call, UNKNOWN if ret is None else output, INF if ret is None else ret))
        return out


def run_seed(seed: int, **kw) -> SimResult:
    return Simulation(seed, **kw).run()
