"""`logtide cluster`: a whole local cluster as separate processes on loopback ports.

layout.py is the cluster's record on disk (D/cluster.json), roles.py the command line of each
role, process_state.py whether a recorded process still runs, probe.py what each live process
answers, local_cluster.py the up/status/kill/down operations. See docs/cluster.md.
"""
