"""`spark.read.format("logtide.wal").load(dir)`: WAL records as rows, one per block reference.

Works on a logtide log directory (default) and on a PostgreSQL 15 pg_wal directory or WAL archive
(`.option("format", "postgres")`). One partition per segment file (`from_lsn`/`to_lsn` options
leave out segments wholly outside [from_lsn, to_lsn); rows are not filtered by them); read() yields Arrow batches
built from the Cython decoders' numpy arrays.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from logtide.spark.wal_rows import WAL_SCHEMA


class SegmentPartition(InputPartition):
    def __init__(self, segment):
        super().__init__(segment.name)
        self.segment = segment


class WalDataSource(DataSource):
    """The WAL as rows: lsn, xid, rmid, info, spc, db, rel, fork, block, has_image, record_len."""

    @classmethod
    def name(cls) -> str:
        return "logtide.wal"

    def schema(self) -> str:
        return WAL_SCHEMA

    def reader(self, schema) -> "WalReader":
        path = self.options.get("path")
        if not path:
            raise ValueError("logtide.wal needs a directory: spark.read.format('logtide.wal').load(dir)")
        fmt = self.options.get("format", "logtide").lower()
        if fmt not in ("logtide", "postgres"):
            raise ValueError(f"logtide.wal format is 'logtide' or 'postgres', got {fmt!r}")
        lo = int(self.options.get("from_lsn", 0))
        hi = int(self.options.get("to_lsn", 2**63 - 1))
        return WalReader(path, fmt, lo, hi)


class WalReader(DataSourceReader):
    def __init__(self, path: str, fmt: str, from_lsn: int = 0, to_lsn: int = 2**63 - 1):
        self.path = path
        self.fmt = fmt
        self.lo, self.hi = from_lsn, to_lsn     # only segments that may hold LSNs in [lo, hi)

    def partitions(self):
        if self.fmt == "postgres":
            from logtide.spark.pg_segments import list_pg_segments
            segs = [s for s in list_pg_segments(self.path)
                    if s.start_lsn < self.hi and s.start_lsn + s.seg_size > self.lo]
        else:
            from logtide.spark.log_segments import list_log_segments
            segs = [s for s in list_log_segments(self.path)
                    if s.first_lsn < self.hi and (s.next_first is None or s.next_first > self.lo)]
        return [SegmentPartition(s) for s in segs]

    def read(self, partition):
        from logtide.spark.wal_rows import pg_rows, wal_batch
        seg = partition.segment
        if self.fmt == "postgres":
            from logtide.spark.pg_segments import decode_segment
            rows = pg_rows(decode_segment(seg))
        else:
            from logtide.spark.log_segments import block_refs, scan_segment
            c = block_refs(scan_segment(seg), null_rows=True)
            rows = dict(lsn=c["lsn"], xid=c["xid"], rmid=c["rmid"], info=c["info"], tags=c["tags"],
                        has_image=c["has_image"], valid=c["valid"], record_len=c["rec_len"])
        n = len(rows["lsn"])
        step = 1 << 18
        for a in range(0, n, step):
            yield wal_batch(**{k: v[a:a + step] for k, v in rows.items()})
