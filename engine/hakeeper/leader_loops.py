"""The HAKeeper leader's loops: logical time and the checkers.

While its replica leads, one thread proposes a Tick `ticks_per_second` times a second (missed
ticks are skipped, never proposed in a burst: logical time only has to move while a leader can
propose) and, every `check_interval` seconds, reads the state after a ReadIndex confirmed its
leadership (`leader_read_index` names the term), runs the checkers (`leader_batch`) and proposes
the ScheduleCommandBatch stamped with that term. It also proposes the cluster info once, while
HAKeeper is still Created. A follower's thread only waits.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from logtide.engine.hakeeper.checkers import leader_batch
from logtide.engine.hakeeper.cluster_info import BootstrapState, ClusterInfo
from logtide.engine.hakeeper.command import InitialCluster, Tick, encode_command
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.raft.errors import RaftError
from logtide.errors import LogtideError

log = logging.getLogger("logtide.hakeeper")

CHECK_INTERVAL = 2.0    # seconds between checker rounds ("every few seconds")
PROPOSE_TIMEOUT = 1.0   # a tick or a batch not committed by then is given up (the next one follows)


class LeaderLoops:
    def __init__(self, node: Any, sm: Any, config: HAKeeperConfig, *, check_interval: float = CHECK_INTERVAL,
                 cluster_info: ClusterInfo | None = None, name: str = "hakeeper") -> None:
        self.node, self.sm, self.config = node, sm, config
        self.check_interval = check_interval
        self.cluster_info = cluster_info
        self.ticks_proposed = self.batches_proposed = 0
        self.commands_proposed: list = []    # every command of an accepted batch, in order (logged too)
        self._stop = threading.Event()
        self._tick = encode_command(Tick())
        self._thread = threading.Thread(target=self._run, name=f"{name}-leader", daemon=True)

    def start(self) -> "LeaderLoops":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        period = 1.0 / self.config.ticks_per_second
        next_tick = time.monotonic()
        next_check = next_tick + self.check_interval
        while not self._stop.is_set():
            now = time.monotonic()
            if next_tick > now:
                self._stop.wait(next_tick - now)
                continue
            next_tick = max(next_tick + period, time.monotonic())   # behind: skip, do not burst
            if not self.node.is_leader():
                next_check = time.monotonic() + self.check_interval   # a new leader checks after its first ticks
                continue
            try:
                self.node.propose(self._tick, timeout=PROPOSE_TIMEOUT)
                self.ticks_proposed += 1
                if self.cluster_info is not None and self.sm.lookup("bootstrap") == BootstrapState.CREATED:
                    self.node.propose(encode_command(InitialCluster(self.cluster_info)), timeout=PROPOSE_TIMEOUT)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.check_interval
                    self._check()
            except (RaftError, LogtideError) as exc:   # lost leadership, a timeout: the next turn retries
                log.info("hakeeper leader loop: %s: %s", type(exc).__name__, exc)

    def _check(self) -> None:
        _index, term = self.node.leader_read_index(timeout=PROPOSE_TIMEOUT)
        state = self.sm.lookup("state")
        batch = leader_batch(state, self.config, term)
        if batch is None:
            return
        taken = self.node.propose(encode_command(batch), timeout=PROPOSE_TIMEOUT)[1]
        if taken >= 0:
            self.batches_proposed += 1
            self.commands_proposed.extend(batch.commands)
            for c in batch.commands:
                log.warning("hakeeper: term %d tick %d schedules %s", term, state.tick, c)
