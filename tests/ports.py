"""Free loopback ports for tests that start replicas on fixed addresses: the benchmarks' helper."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bench/__init__ takes the source tree off sys.path again (the tests run the installed wheel)
from bench.raft_cluster import free_ports  # noqa: E402,F401
