"""`spark.read.format("logtide.pages").option("lsn", N).load(dir)`: the pages of a logtide.replay
directory at LSN N, as rows (spc, db, rel, fork, block, page_lsn, page).

Each input partition is one page-ownership partition of the pages plan of partitioned replay:
it finds its pages' LSNs (LogIndex or WAL-meta scan), applies the records with the Cython redo
and yields the pages as Arrow batches. `.option("partitions", P)` (default 4).
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from logtide.spark.redo_task import PAGES_ROW_SCHEMA


class OwnerPartition(InputPartition):
    def __init__(self, part: int):
        super().__init__(part)
        self.part = part


class PagesDataSource(DataSource):
    """Replayed pages at an LSN."""

    @classmethod
    def name(cls) -> str:
        return "logtide.pages"

    def schema(self) -> str:
        return PAGES_ROW_SCHEMA

    def reader(self, schema) -> "PagesReader":
        path = self.options.get("path")
        if not path or "lsn" not in self.options:
            raise ValueError("logtide.pages needs .option('lsn', N).load(dir)")
        return PagesReader(path, int(self.options["lsn"]), int(self.options.get("partitions", 4)))


class PagesReader(DataSourceReader):
    def __init__(self, path: str, lsn: int, partitions: int):
        from logtide.spark.replay_input import analyze
        self.inp = analyze(path, lsn)        # fails here, on the driver, for an LSN past the log's end
        self.partitions_n = partitions

    def partitions(self):
        return [OwnerPartition(p) for p in range(self.partitions_n)]

    def read(self, partition):
        from logtide.spark.log_segments import SegmentMaps
        from logtide.spark.page_lsns import owned_rows
        from logtide.spark.redo_task import PartitionReplayer, ReplayContext
        inp = self.inp
        ctx = ReplayContext(tuple(s.path for s in inp.segments), inp.pages_dir, inp.target_lsn, None,
                            self.partitions_n)
        first = max(inp.consistent_lsn + 1, inp.segments[0].first_lsn)
        maps = SegmentMaps()        # scanned here, replayed here: one mapping of each segment
        try:
            rows = owned_rows(ctx, inp.segments, inp.index_dir, first, inp.base_tags(), partition.part, maps)
            rp = PartitionReplayer(ctx, maps)
            try:
                yield from rp.apply(*rows)
            finally:
                rp.close()
        finally:
            maps.close()
