"""The deterministic Raft simulator: `python -m logtide.engine.raft.sim --seed N` replays one run."""
from logtide.engine.raft.sim.cluster import Simulation, SimResult, run_seed

__all__ = ["SimResult", "Simulation", "run_seed"]
