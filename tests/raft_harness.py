"""A small lock-step driver for Raft core tests: real RawNodes and MemoryStorages, a perfect
network that can cut links, and the Ready loop done the way the contract says."""
from __future__ import annotations

from logtide.engine.raft import Config, MemoryStorage, RawNode
from logtide.engine.raft import messages as M


class Net:
    def __init__(self, ids, election_tick: int = 10, seed: int = 7, storage=None, **cfg) -> None:
        self.election_tick = election_tick
        self.seed = seed
        self.cfg = cfg
        self.stores: dict[int, MemoryStorage] = {}
        self.nodes: dict[int, RawNode] = {}
        self.applied: dict[int, list] = {}
        self.read_states: dict[int, list] = {}
        self.cut: set[tuple[int, int]] = set()
        self.inflight: list = []
        self.sent: list = []
        for i in ids:
            self.add(i, storage(i, ids) if storage else MemoryStorage.bootstrap(ids))

    def add(self, i: int, storage: MemoryStorage) -> RawNode:
        self.stores[i] = storage
        self.nodes[i] = RawNode(Config(i, election_tick=self.election_tick, seed=self.seed, **self.cfg), storage,
                                applied=storage.snapshot().meta.index)
        self.applied[i] = []
        self.read_states[i] = []
        return self.nodes[i]

    def restart(self, i: int) -> RawNode:
        """A crash and restart: a new RawNode over what the storage holds."""
        st = self.stores[i]
        return self.add(i, st)

    def process(self, i: int) -> bool:
        n = self.nodes[i]
        if not n.has_ready():
            return False
        rd = n.ready()
        self.inflight += rd.send_now  # a leader's appends may leave before its write
        self.sent += rd.send_now
        st = self.stores[i]
        if hasattr(st, "save"):  # DiskStorage: the real, ordered, durable write
            st.save(rd)
        else:
            if rd.snapshot is not None:
                st.apply_snapshot(rd.snapshot)
            if rd.hard_state is not None:
                st.set_hard_state(rd.hard_state)
            st.append(rd.entries)
        out = n.advance(rd)
        self.inflight += out.messages
        self.sent += out.messages
        self.applied[i] += out.committed_entries
        self.read_states[i] += out.read_states
        return True

    def settle(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            busy = False
            for i in list(self.nodes):
                busy |= self.process(i)
            msgs, self.inflight = self.inflight, []
            for m in msgs:
                if (m.frm, m.to) in self.cut or m.to not in self.nodes:
                    continue
                self.nodes[m.to].step(m)
                busy = True
            if not busy:
                return

    def tick(self, n: int = 1, only=None) -> None:
        for _ in range(n):
            for i, node in self.nodes.items():
                if only is None or i in only:
                    node.tick()
            self.settle()

    def leader(self) -> int:
        ls = [i for i, n in self.nodes.items() if n.raft.state == M.LEADER]
        return max(ls, key=lambda i: self.nodes[i].raft.term) if ls else 0

    def elect(self, max_ticks: int = 100) -> int:
        for _ in range(max_ticks):
            if self.leader():
                self.settle()
                return self.leader()
            self.tick()
        raise AssertionError("no leader elected")

    def isolate(self, i: int) -> None:
        for j in self.nodes:
            if j != i:
                self.cut |= {(i, j), (j, i)}

    def heal(self) -> None:
        self.cut.clear()

    def data(self, i: int) -> list[bytes]:
        return [e.data for e in self.applied[i] if e.type == M.ENTRY_NORMAL and e.data]
