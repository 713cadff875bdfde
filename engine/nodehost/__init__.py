"""The NodeHost (dragonboat's name, which MatrixOne's log service runs on): what hosts a Raft node
beside the pure core of engine/raft, which does no I/O.

node.py drives a RawNode on a thread of its own (RaftNode: proposals, ReadIndex, membership,
snapshots, the state machine), disk_storage.py is its durable log and state, transport.py carries
its messages to peers over the framed carrier, channel.py dials a replica's address.
"""
