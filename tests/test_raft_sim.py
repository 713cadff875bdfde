"""The deterministic simulator: 2,000 seeds of faults with Raft's safety properties checked after
every step, exact replay of a seed, and proof that the checker catches a driver that breaks the
persist-before-acknowledge rule."""
import subprocess
import sys

from logtide.engine.raft.sim import Simulation, run_seed

SEEDS = 2000


def test_2000_seeds_keep_every_safety_property_and_heal():
    failures, heal = [], []
    totals = {"acks": 0, "reads": 0, "crashes": 0, "snapshots": 0, "conf_changes": 0, "elections": 0}
    for seed in range(SEEDS):
        res = run_seed(seed)
        if not res.ok:
            failures.append(f"seed {seed}: {res.error}\n  replay: {res.replay}")
            continue
        heal.append(res.heal_ticks)
        for k in totals:
            totals[k] += getattr(res, k)
    assert not failures, "\n".join(failures[:10])
    # the runs really exercised what they claim to
    assert totals["crashes"] > SEEDS and totals["snapshots"] > SEEDS and totals["conf_changes"] > SEEDS // 2
    assert totals["acks"] > 20 * SEEDS and totals["reads"] > 5 * SEEDS and totals["elections"] > 2 * SEEDS
    assert max(heal) <= 200


def test_a_seed_replays_exactly_from_its_command_line(tmp_path):
    a, b = run_seed(17), run_seed(17)
    assert repr(a) == repr(b) and a.ok
    out = subprocess.run([sys.executable, "-m", "logtide.engine.raft.sim", "--seed", "17"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == repr(a)
    assert a.replay == "python -m logtide.engine.raft.sim --seed 17"


def test_acknowledging_before_sync_is_caught(tmp_path):
    """The etcd #14370 mistake: a driver that advances (sends, applies, acknowledges) before its
    write is durable. Crashes that tear such writes must surface as a safety violation."""
    caught = None
    for seed in range(1000):
        res = Simulation(seed, bug="ack-before-sync").run()
        if not res.ok:
            caught = res
            break
    assert caught is not None, "no seed caught a driver that acknowledges unsynced writes"
    assert "--bug ack-before-sync" in caught.replay
    out = subprocess.run([sys.executable, "-m", "logtide.engine.raft.sim", "--seed", str(caught.seed), "--bug",
                          "ack-before-sync"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and caught.error in out.stdout and caught.replay in out.stdout
    # the same seeds with the correct driver are safe
    assert run_seed(caught.seed).ok
