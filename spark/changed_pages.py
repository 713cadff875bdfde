"""Changed pages of a PostgreSQL WAL archive between two LSNs: the block map an incremental backup
needs (pg_probackup's page map, PostgreSQL 17's WAL summaries), computed by Spark.

Segments overlapping [from_lsn, to_lsn) are read in parallel through the `logtide.wal` source
(the Cython WAL reader in the executors; a record crossing into the next segment is completed
from that segment's first pages), then grouped by page.
"""
from __future__ import annotations

from logtide.arg_checks import lsn_arg
from logtide.errors import InvalidArgument

PAGE_KEY = ["spc", "db", "rel", "fork", "block"]


def pg_changed_pages(spark, wal_dir, from_lsn: int, to_lsn: int):
    """DataFrame (spc, db, rel, fork, block, first_lsn, last_lsn, records) for [from_lsn, to_lsn).
    The bounds are ints in [0, 2**64) with from_lsn <= to_lsn: InvalidArgument otherwise, before Spark runs."""
    # checked here: the source is given them as strings, so NaN, 1.5 or True reached it as "nan", "1.5", "True"
    from_lsn, to_lsn = lsn_arg("from_lsn", from_lsn), lsn_arg("to_lsn", to_lsn)
    if to_lsn < from_lsn:
        raise InvalidArgument(f"need from_lsn <= to_lsn, got [{from_lsn}, {to_lsn})")
    from pyspark.sql import functions as F
    from logtide.spark import register
    register(spark)
    df = (spark.read.format("logtide.wal").option("format", "postgres").option("from_lsn", str(from_lsn))
          .option("to_lsn", str(to_lsn)).load(str(wal_dir)))
    rows = df.where((F.col("lsn") >= from_lsn) & (F.col("lsn") < to_lsn) & F.col("block").isNotNull())
    return rows.groupBy(*PAGE_KEY).agg(F.min("lsn").alias("first_lsn"), F.max("lsn").alias("last_lsn"),
                                       F.count(F.lit(1)).alias("records"))
