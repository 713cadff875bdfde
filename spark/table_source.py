"""`spark.read.format("logtide.table").option("table", T).option("ts", ts).load(tn_dir)`."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition


class TableDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "logtide.table"

    def schema(self):
        from logtide.spark.snapshot_job import table_schema
        return table_schema(self.options["path"], self.options["table"])

    def reader(self, schema) -> "TableReader":
        for k in ("path", "table", "ts"):
            if k not in self.options:
                raise ValueError("logtide.table needs .option('table', T).option('ts', ts).load(tn_dir)")
        return TableReader(self.options["path"], self.options["table"], int(self.options["ts"]),
                           int(self.options.get("partitions", 4)))


class KeyPartition(InputPartition):
    def __init__(self, part: int):
        super().__init__(part)
        self.part = part


class TableReader(DataSourceReader):
    def __init__(self, path: str, table: str, ts: int, partitions: int):
        from logtide.spark.snapshot_job import plan_snapshot
        self.plan = plan_snapshot(path, table, ts)       # a ts below the retained history fails here
        self.n = partitions

    def partitions(self):
        return [KeyPartition(p) for p in range(self.n)]

    def read(self, partition):
        from logtide.spark.snapshot_job import snapshot_partition
        yield from snapshot_partition(self.plan, partition.part, self.n)
