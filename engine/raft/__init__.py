"""The Raft consensus core (pure: no I/O, threads, sockets or clocks) and its proofs.

Drive a node with RawNode: tick/step/propose in, then the Ready loop (raw_node.py explains the
persist-before-send contract). sim/ is the deterministic simulator, lincheck/ the
linearizability checker.
"""
from logtide.engine.raft.messages import (
    ADD_LEARNER, ADD_VOTER, REMOVE, ConfChange, ConfState, Entry, HardState, Message, ReadState, Snapshot,
    SnapshotMeta)
from logtide.engine.raft.raft import Config
from logtide.engine.raft.raw_node import Output, RawNode, Ready
from logtide.engine.raft.storage import MemoryStorage

__all__ = ["ADD_LEARNER", "ADD_VOTER", "REMOVE", "Config", "ConfChange", "ConfState", "Entry", "HardState",
           "MemoryStorage", "Message", "Output", "RawNode", "ReadState", "Ready", "Snapshot", "SnapshotMeta"]
