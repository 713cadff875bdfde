"""A deterministic stream of Readys as a Raft node makes them (entries replacing an uncommitted
tail, term and vote changes, commit advances with and without sync, snapshots from a leader),
saved to DiskStorage by a process that gets killed, and to the simulator's disk model.

Run as a script: `python raft_save_ops.py DIR SEED` saves Readys to DiskStorage in DIR forever,
printing "B k" before save(rd_k) starts and "D k" once it returned."""
import random
import sys

from logtide.engine.raft import messages as M
from logtide.engine.raft.messages import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from logtide.engine.raft.raw_node import Ready

VOTERS = [1, 2, 3]


def readys(seed: int):
    """Readys in the order one node's driver would save them (contiguous, never below commit)."""
    rng = random.Random(seed)
    term, vote, commit = 1, 0, len(VOTERS)
    terms = {i + 1: 1 for i in range(len(VOTERS))}  # index -> term of the node's log after snap
    last = len(VOTERS)
    while True:
        rd = Ready()
        old = (term, vote, commit)
        r = rng.random()
        if r < 0.08 and last - commit < 50:
            # a snapshot from a leader, past our commit (and maybe past our log)
            term += rng.randint(0, 1)
            idx = commit + rng.randint(1, 30)
            # sometimes the log holds the snapshot's last entry (open() keeps such a log after a crash)
            sterm = terms[idx] if idx in terms and rng.random() < 0.5 else term
            rd.snapshot = Snapshot(SnapshotMeta(idx, sterm, ConfState(VOTERS)), b"image-%d" % idx)
            commit = idx
            terms = {}
            last = idx
        if rng.random() < 0.2:
            term += 1
            vote = rng.choice((0, 1, 2, 3))
        if rng.random() < 0.75:
            # entries from a leader: the next ones, or a replaced uncommitted tail
            first = last + 1 if rng.random() < 0.75 or last == commit else rng.randint(commit + 1, last)
            if first <= last:
                term += 1  # a new leader's entries replace the tail
            n = rng.randint(1, 25)
            rd.entries = [Entry(term, first + k, M.ENTRY_NORMAL, rng.randbytes(rng.randint(0, 200))) for k in range(n)]
            for i in range(first, last + 1):
                terms.pop(i, None)
            for e in rd.entries:
                terms[e.index] = e.term
            last = first + n - 1
        if rng.random() < 0.6 and last > commit:
            commit = rng.randint(commit + 1, last)
        hs = (term, vote, commit)
        if hs != old:
            rd.hard_state = HardState(*hs)
        rd.must_sync = bool(rd.entries) or rd.snapshot is not None or hs[:2] != old[:2]
        if rd.hard_state is None and not rd.entries and rd.snapshot is None:
            continue
        yield rd


if __name__ == "__main__":
    from logtide.engine.nodehost.disk_storage import DiskStorage
    st = DiskStorage.open(sys.argv[1], voters=VOTERS, segment_size=4096)
    for k, rd in enumerate(readys(int(sys.argv[2]))):
        print("B", k, flush=True)
        st.save(rd)
        print("D", k, flush=True)
