"""Which partition owns a page, and the Spark shuffle key that lands it there.

A page belongs to partition murmur3(tag) mod P (`_ext/page_owner`). Spark's `repartition(P, col)`
places a row in pmod(Murmur3_x86_32(col, seed 42), P); `spark_keys(P)` picks, for each partition
p, the smallest int whose Spark hash lands in p, so the scan stage emits key = spark_keys(P)[owner]
and Spark's partition p holds exactly the pages logtide's owner function gives p. The redo task
checks this for every row it receives.
"""
from __future__ import annotations

import struct

import numpy as np

from logtide._ext.page_owner import page_owner

SPARK_HASH_SEED = 42


def spark_int_hash(value: int) -> int:
    """Spark's Murmur3Hash of an int column (Murmur3_x86_32.hashInt, seed 42), signed."""
    import mmh3
    return mmh3.hash(struct.pack("<i", value), SPARK_HASH_SEED, signed=True)


def spark_keys(partitions: int) -> np.ndarray:
    """int32[P]: key k with pmod(spark_int_hash(k), P) == p for each partition p."""
    keys = np.full(partitions, -1, dtype=np.int64)
    left, k = partitions, 0
    while left:
        p = spark_int_hash(k) % partitions   # Python's % is already a pmod
        if keys[p] < 0:
            keys[p] = k
            left -= 1
        k += 1
    return keys.astype(np.int32)


def owners(tags: np.ndarray, partitions: int) -> np.ndarray:
    """int32 owner of each (n, 5) uint32 tag row."""
    return page_owner(np.ascontiguousarray(tags, dtype=np.uint32).reshape(-1, 5), partitions)


__all__ = ["owners", "page_owner", "spark_int_hash", "spark_keys"]
