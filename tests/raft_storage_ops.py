"""A deterministic stream of Raft storage writes, applied to DiskStorage (in a process that gets
killed) and to MemoryStorage (the model the recovered disk is compared with).

Run as a script: `python raft_storage_ops.py DIR SEED` applies ops to DiskStorage in DIR forever,
printing the number of ops made durable after each one."""
import random
import sys

from logtide.engine.raft import messages as M
from logtide.engine.raft.messages import ConfState, Entry, HardState


def ops(seed: int):
    rng = random.Random(seed)
    term, last, snap = 1, 3, 0
    while True:
        r = rng.random()
        if r < 0.7:
            # append, sometimes replacing an uncommitted tail with a newer term
            first = last + 1 if rng.random() < 0.8 or last - snap < 3 else rng.randint(snap + 2, last)
            if first <= last:
                term += 1
            n = rng.randint(1, 20)
            ents = [Entry(term, first + k, M.ENTRY_NORMAL, rng.randbytes(rng.randint(0, 300))) for k in range(n)]
            last = first + n - 1
            yield ("append", ents)
        elif r < 0.9:
            term += rng.randint(0, 1)
            yield ("hs", HardState(term, rng.randint(0, 3), rng.randint(snap, last)))
        elif last - snap > 10:
            snap = rng.randint(snap + 1, last - 5)
            yield ("snapshot", snap, b"image-%d" % snap)


def apply(store, op) -> None:
    if op[0] == "append":
        store.append(op[1])
    elif op[0] == "hs":
        store.set_hard_state(op[1])
    else:
        store.create_snapshot(op[1], ConfState([1, 2, 3]), op[2])
        store.compact(op[1])


if __name__ == "__main__":
    from logtide.engine.nodehost.disk_storage import DiskStorage
    st = DiskStorage.open(sys.argv[1], voters=[1, 2, 3], segment_size=4096)
    for k, op in enumerate(ops(int(sys.argv[2])), 1):
        apply(st, op)
        print(k, flush=True)
