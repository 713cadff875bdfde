"""HAKeeper's group in the deterministic Raft simulator: `python -m logtide.engine.hakeeper.sim --seed N`."""
from logtide.engine.hakeeper.sim.hakeeper_simulation import HAKeeperSimulation, run_hakeeper_seed

__all__ = ["HAKeeperSimulation", "run_hakeeper_seed"]
