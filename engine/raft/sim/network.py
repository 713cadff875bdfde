"""The simulated network: latency, drop, duplication, reordering and partitions, all from one RNG.

Reordering needs no rule of its own: each copy of a message gets its own random latency.
A partition is a set of blocked directed links, so one-way (asymmetric) partitions are natural.
"""
from __future__ import annotations

import random


class SimNetwork:
    def __init__(self, rng: random.Random, latency: tuple[int, int], p_drop: float, p_dup: float) -> None:
        self.rng = rng
        self.latency = latency
        self.p_drop = p_drop
        self.p_dup = p_dup
        self.blocked: set[tuple[int, int]] = set()
        self.sent = self.dropped = self.duplicated = 0

    def deliveries(self, frm: int, to: int) -> list[int]:
        """The delays after which copies of one message arrive (empty: it is lost)."""
        self.sent += 1
        if (frm, to) in self.blocked:
            self.dropped += 1
            return []
        rng = self.rng
        if self.p_drop and rng.random() < self.p_drop:
            self.dropped += 1
            return []
        lo, hi = self.latency
        out = [rng.randint(lo, hi)]
        if self.p_dup and rng.random() < self.p_dup:
            self.duplicated += 1
            out.append(rng.randint(lo, hi * 3))
        return out

    def partition(self, side_a, side_b, one_way: bool = False) -> None:
        """Block a -> b (and b -> a unless one_way)."""
        for a in side_a:
            for b in side_b:
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))

    def heal(self) -> None:
        self.blocked.clear()
