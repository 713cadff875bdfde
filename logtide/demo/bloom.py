"""Demo stage: Bloom4K blocks over generated PageTags, with measured false-positive rates."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

ORDER = 10
NAME = "bloom"
TITLE = "Bloom4K: 4096-byte LogIndex bloom blocks over generated PageTags"


def run(workdir: Path) -> bool:
    from logtide import Bloom4K, murmur3_128_many
    from logtide.pagetag import random_tags

    tables, per_table, probes = 64, 819, 2_000_000
    tags = random_tags(tables * per_table, seed=7, relations=64, blocks=1 << 24)
    blocks = []
    t0 = time.perf_counter()
    for t in range(tables):
        b = Bloom4K(table_id=t, min_lsn=t * per_table + 1, max_lsn=(t + 1) * per_table)
        b.add_many(tags[t * per_table:(t + 1) * per_table])
        blocks.append(b.to_bytes())
    build_s = time.perf_counter() - t0
    path = workdir / "blooms.bin"
    path.write_bytes(b"".join(blocks))

    # reload from disk, verify CRCs, then check members and count false positives
    raw = path.read_bytes()
    loaded = [Bloom4K.from_bytes(raw[i:i + 4096]) for i in range(0, len(raw), 4096)]
    misses = 0
    for t, b in enumerate(loaded):
        misses += int((~b.contains_many(tags[t * per_table:(t + 1) * per_table])).sum())
    # probe keys come from a relation range no inserted tag uses, so every hit is a false positive
    others = random_tags(probes, seed=11, relations=64, blocks=1 << 24)
    others[:, 2] += 1_000_000
    t0 = time.perf_counter()
    fp = sum(int(b.contains_many(others).sum()) for b in loaded[:8])
    probe_s = time.perf_counter() - t0
    measured = fp / (8 * probes)
    k, m = loaded[0].k, loaded[0].nbits
    theory = (1 - math.exp(-k * per_table / m)) ** k
    t0 = time.perf_counter()
    murmur3_128_many(tags)
    hash_s = time.perf_counter() - t0

    print(f"blocks: {tables} x 4096 bytes = {path.stat().st_size} bytes on disk, k={k}, m={m} bits, "
          f"{per_table} tags each, fill {np.mean([b.fill_ratio() for b in loaded]):.3f}")
    print(f"build: {tables * per_table / build_s / 1e6:.2f} M tags/s   "
          f"probe: {8 * probes / probe_s / 1e6:.2f} M keys/s   "
          f"murmur3 batch: {len(tags) / hash_s / 1e6:.2f} M keys/s")
    print(f"false negatives: {misses} (must be 0)")
    print(f"false positives: {fp} of {8 * probes} probes = {measured:.2e} (theory {theory:.2e})")
    return misses == 0
