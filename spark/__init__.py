"""PySpark jobs that replay logs in parallel, with the compiled extension on the executors.

    from logtide.spark import get_session, register, partitioned_replay
    spark = get_session()                      # local[*]; get_session("spark://...") for a cluster
    register(spark)                            # spark.read.format("logtide.wal" | "logtide.pages" | "logtide.table")
    partitioned_replay(spark, data_dir, target_lsn, out_dir, partitions=4, plan="shuffle")

PySpark itself is imported only by the functions that need it.
"""
from logtide.spark.errors import (ReplayInputError, SegmentCorruptError, SegmentMissingError, SnapshotRangeError,
                                  SparkSetupError)
from logtide.spark.session import get_session


def register(spark) -> None:
    """Register logtide's data sources with a SparkSession: logtide.wal, logtide.pages, logtide.table."""
    from logtide.spark.wal_source import WalDataSource
    from logtide.spark.pages_source import PagesDataSource
    from logtide.spark.table_source import TableDataSource
    for ds in (WalDataSource, PagesDataSource, TableDataSource):
        spark.dataSource.register(ds)


def partitioned_replay(spark, data_dir, target_lsn, out_dir, *, partitions=None, plan="auto"):
    """Replay a logtide.replay directory up to target_lsn on Spark; see replay_job.py."""
    from logtide.spark.replay_job import partitioned_replay as run
    return run(spark, data_dir, target_lsn, out_dir, partitions=partitions, plan=plan)


def pg_changed_pages(spark, wal_dir, from_lsn, to_lsn):
    """Changed pages of a PostgreSQL WAL archive in [from_lsn, to_lsn); see changed_pages.py."""
    from logtide.spark.changed_pages import pg_changed_pages as run
    return run(spark, wal_dir, from_lsn, to_lsn)


def table_snapshot(spark, tn_dir, table, ts):
    """A logtail table at ts as a DataFrame; see snapshot_job.py."""
    from logtide.spark.snapshot_job import table_snapshot as run
    return run(spark, tn_dir, table, ts)


__all__ = ["ReplayInputError", "SegmentCorruptError", "SegmentMissingError", "SnapshotRangeError",
           "SparkSetupError", "get_session", "partitioned_replay", "pg_changed_pages", "register",
           "table_snapshot"]
