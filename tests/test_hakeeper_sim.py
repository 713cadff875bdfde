"""HAKeeper's group in the deterministic Raft simulator (issue 12's, engine/raft/sim): HAKeeper's
own traffic (ticks, registrations, heartbeats, bootstrap proposed again and again, malformed
commands, the leader's checker batches) through crashes, partitions, snapshots and membership
changes, with Raft's safety checked at every step and every replica's HAKeeper state compared at
each applied index. A failing seed replays from one command."""
import random
import subprocess
import sys
import time

from logtide.engine.hakeeper import HAKeeperStateMachine, Tick, encode_command
from logtide.engine.hakeeper.sim import HAKeeperSimulation, run_hakeeper_seed
from logtide.engine.hakeeper.sim.sim_state_machine import HAKeeperSimStateMachine
from logtide.engine.raft.sim import run_seed

from seed_pool import run_seeds

# (fault ticks, fixed seeds, fresh random seeds): ~20 s together on one core, ~10 s on two
SWEEPS = [(150, range(75), 25), (600, range(20), 10), (3000, range(2), 1)]


def _sweep(jobs):
    failures, results = [], run_seeds(run_hakeeper_seed, jobs)
    for (seed, ticks), res in zip(jobs, results):
        if not res.ok:
            failures.append(f"seed {seed} ({ticks} fault ticks): {res.error}\n  replay: {res.replay}")
    return failures, results


def test_hakeeper_replicas_agree_at_every_index_through_faults():
    jobs = []
    fresh = []
    for ticks, fixed, n in SWEEPS:
        start = random.SystemRandom().randrange(10**6, 10**9)
        fresh.append(f"{start}:{start + n} at {ticks} ticks")
        jobs += [(s, ticks) for s in fixed] + [(s, ticks) for s in range(start, start + n)]
    print("fresh seeds", fresh)
    failures, results = _sweep(jobs)
    assert not failures, f"fresh seeds {fresh}\n" + "\n".join(failures[:10])
    # the runs did what they claim: faults, snapshots, and HAKeeper really ran
    assert sum(r.crashes for r in results) > len(results) and sum(r.snapshots for r in results) > len(results)
    assert sum(r.batches for r in results) > 100 and sum(r.refused for r in results) > 100
    assert sum(r.bootstrap == "RUNNING" for r in results) > 20
    assert max(r.tick for r in results) > 40


def test_a_hakeeper_seed_replays_exactly_from_its_command_line(tmp_path):
    a, b = run_hakeeper_seed(17, fault_ticks=600), run_hakeeper_seed(17, fault_ticks=600)
    assert repr(a) == repr(b) and a.ok
    assert a.replay == "python -m logtide.engine.hakeeper.sim --seed 17 --fault-ticks 600"
    out = subprocess.run([sys.executable, "-m", "logtide.engine.hakeeper.sim", "--seed", "17", "--fault-ticks",
                          "600"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == repr(a)


def test_the_plain_simulator_is_unchanged_by_the_hooks():
    """The hooks HAKeeper's run uses leave the plain workload's seeds as they were."""
    res = run_seed(17)
    assert res.ok and res.replay == "python -m logtide.engine.raft.sim --seed 17"
    assert "hakeeper" not in repr(res)


class _ClockStateMachine(HAKeeperSimStateMachine):
    """A HAKeeper replica that lets the wall clock into its state: what HAKeeper must never do."""

    def apply(self, e):
        super().apply(e)
        if e.data and e.data.partition(b";")[2] == encode_command(Tick()):
            self.hk.state.tick += time.perf_counter_ns() % 2
            self.digest = self.state_digest()

    @classmethod
    def restore(cls, data, index):
        base = HAKeeperSimStateMachine.restore(data, index)
        return cls(base.index, base.hk, base.refused)


class _ClockSimulation(HAKeeperSimulation):
    def restore_state_machine(self, data, index):
        return _ClockStateMachine.restore(data, index)


def test_the_check_catches_replicas_whose_hakeeper_states_diverge():
    caught = None
    for seed in range(50):
        res = _ClockSimulation(seed, fault_ticks=600).run()
        if not res.ok:
            caught = res
            break
    assert caught is not None and "state-machine safety" in caught.error
    assert HAKeeperStateMachine().apply(Tick()) == 1
