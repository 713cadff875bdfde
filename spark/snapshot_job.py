"""table_snapshot: a logtail table at ts, rebuilt from what the TN keeps, the way Delta Lake rebuilds
a snapshot: the newest checkpoint at or below ts, its data and tombstone objects (Parquet), and the
logtail records still in the log after it; partitioned by row id, one version per row id (a row id
is inserted once), tombstones applied. Equal to `ComputeNode.read(table, ts)` row for row.

A ts whose checkpoint's log suffix is gone (truncated away) is below the retained history:
SnapshotRangeError.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.logtail_format import BLOCK, OFFSET, TS
from logtide.engine.logtail.logtail_args import ts_arg
from logtide.engine.objectstore import BLOCK_ROWS
from logtide.errors import UnknownTableError
from logtide.spark.errors import SnapshotRangeError
from logtide.spark.log_segments import WAL_DATA_OFFSET, list_log_segments, scan_segment

CHECKPOINT_PREFIX = "ckp-"
ROWID = "__rowid"
# numpy dtype -> Spark SQL type of a snapshot column (Spark has no unsigned ints: widen them)
SPARK_TYPES = {"b1": "boolean", "i1": "tinyint", "i2": "smallint", "i4": "int", "i8": "bigint", "u1": "smallint",
               "u2": "int", "u4": "bigint", "u8": "decimal(20,0)", "f4": "float", "f8": "double"}


@dataclass
class SnapshotPlan:
    tn_dir: str
    table: str
    ts: int
    tdef: TableDef
    checkpoint: dict | None                       # {"name", "ts", "lsn"} or None (log from LSN 1)
    data_objects: list[str] = field(default_factory=list)
    tombstones: list[str] = field(default_factory=list)
    log_inserts: list = field(default_factory=list)     # pa.Tables of the log's insert entries
    log_deletes: list = field(default_factory=list)
    log_records: int = 0

    @property
    def objects_dir(self) -> str:
        return os.path.join(self.tn_dir, "objects")

    def object_path(self, name: str) -> str:
        return os.path.join(self.objects_dir, name)


def _checkpoints(objects_dir: str) -> list[tuple[int, str]]:
    if not os.path.isdir(objects_dir):
        raise SnapshotRangeError(f"no object store at {objects_dir}")
    out = []
    for n in os.listdir(objects_dir):
        if n.startswith(CHECKPOINT_PREFIX) and n.endswith(".json"):
            out.append((int(n[len(CHECKPOINT_PREFIX):-5]), n))
    return sorted(out)


def _log_payloads(log_dir: str, from_lsn: int):
    """(lsn, payload) of every user record from from_lsn on; SnapshotRangeError when it is gone."""
    segs = list_log_segments(log_dir)
    if segs[0].first_lsn > from_lsn:
        raise SnapshotRangeError(f"the log starts at LSN {segs[0].first_lsn}: the records from LSN {from_lsn} on "
                                 f"that this ts needs were truncated")
    for seg in segs:
        if seg.next_first is not None and seg.next_first <= from_lsn:
            continue
        s = scan_segment(seg)
        mv = memoryview(s.buf)
        for k in np.nonzero((s.types == 0) & (np.arange(len(s.starts)) + seg.first_lsn >= from_lsn))[0].tolist():
            a = int(s.starts[k]) + WAL_DATA_OFFSET
            yield seg.first_lsn + k, bytes(mv[a:int(s.starts[k]) + 20 + int(s.lengths[k])])


def plan_snapshot(tn_dir, table: str, ts: int) -> SnapshotPlan:
    """Choose the checkpoint, list the objects and read the log tail for `table` at `ts` (an int in
    [0, 2**64): TypeError or InvalidArgument otherwise, as ComputeNode.read)."""
    ts = ts_arg("ts", ts)       # NaN sorted above every ts (every row); a float was floored
    tn_dir = os.fspath(tn_dir)
    objects = os.path.join(tn_dir, "objects")
    ckps = _checkpoints(objects)
    below = [c for c in ckps if c[0] <= ts]
    ckp, tdef, data, tombs = None, None, [], []
    if below:
        body = json.loads(open(os.path.join(objects, below[-1][1]), "rb").read())
        ckp = {"name": below[-1][1], "ts": body["ts"], "lsn": body["lsn"]}
        t = body["tables"].get(table)
        if t is not None:
            tdef = TableDef.from_json(t["def"])
            for o in t["objects"]:
                (data if o["kind"] == "data" else tombs).append(o["name"])
    plan = SnapshotPlan(tn_dir, table, ts, tdef, ckp, data, tombs)
    start = ckp["lsn"] + 1 if ckp else 1
    try:
        tail = _log_payloads(os.path.join(tn_dir, "log"), start)
        for lsn, payload in tail:
            rec = fmt.decode(payload)
            plan.log_records += 1
            if rec.kind == fmt.CREATE_TABLE and rec.info["table"]["name"] == table and plan.tdef is None:
                plan.tdef = TableDef.from_json(rec.info["table"])
            elif rec.kind == fmt.COMMIT:
                for tb, kind, t in rec.batches:
                    if tb == table:
                        (plan.log_inserts if kind == fmt.INSERT else plan.log_deletes).append(t)
            elif rec.kind == fmt.FLUSH:
                m = rec.info["meta"].get(table)
                for o in (m or {}).get("objects", []):
                    lst = plan.data_objects if o["kind"] == "data" else plan.tombstones
                    if o["name"] not in lst:
                        lst.append(o["name"])
    except SnapshotRangeError as exc:
        oldest = f"; the oldest checkpoint still usable is at ts {ckps[-1][0]}" if ckps else ""
        raise SnapshotRangeError(f"ts {ts} is below the retained history of {tn_dir}: {exc}{oldest}") from None
    if plan.tdef is None:
        raise UnknownTableError(f"no table {table!r} in {tn_dir} as of ts {ts}")
    return plan


def table_schema(tn_dir, table: str) -> str:
    """The Spark DDL schema of the table's columns (from its newest definition)."""
    plan_ts = 2**63 - 1
    tdef = plan_snapshot(tn_dir, table, plan_ts).tdef
    return ", ".join(f"`{c}` {SPARK_TYPES[np.dtype(d).str[1:]]}" for c, d in tdef.columns)


def _rowid(t) -> np.ndarray:
    return t.column(BLOCK).to_numpy().astype(np.int64) * BLOCK_ROWS + t.column(OFFSET).to_numpy().astype(np.int64)


def visible_rows(plan: SnapshotPlan):
    """The table at plan.ts as a pyarrow Table of its columns (numpy and Arrow, no per-row objects)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    names = [c for c, _ in plan.tdef.columns]
    ins = [pq.read_table(plan.object_path(n), columns=[BLOCK, OFFSET, TS, *names]) for n in plan.data_objects]
    ins += [t.select([BLOCK, OFFSET, TS, *names]) for t in plan.log_inserts]
    dels = [pq.read_table(plan.object_path(n), columns=[BLOCK, OFFSET, TS]) for n in plan.tombstones]
    dels += [t.select([BLOCK, OFFSET, TS]) for t in plan.log_deletes]
    schema = plan.tdef.arrow_schema()
    if not ins:
        return schema.empty_table()
    t = pa.concat_tables([x.cast(ins[0].schema) for x in ins])
    t = t.filter(pa.compute.less_equal(t.column(TS), plan.ts))
    rid = _rowid(t)
    _, first = np.unique(rid, return_index=True)        # a row id's copies (object and log) are equal
    t, rid = t.take(pa.array(first)), rid[first]
    if dels:
        d = pa.concat_tables(dels)
        dead = _rowid(d)[d.column(TS).to_numpy() <= plan.ts]
        keep = ~np.isin(rid, dead)
        t = t.filter(pa.array(keep))
    return t.select(names).cast(schema)


def snapshot_partition(plan: SnapshotPlan, part: int, partitions: int):
    """The rows of partition `part` (by primary key) as Arrow batches typed like table_schema."""
    import pyarrow as pa
    t = visible_rows(plan)
    pk = t.column(plan.tdef.pk).to_numpy()
    t = t.filter(pa.array(np.mod(pk, partitions) == part))
    yield from _spark_typed(t, plan.tdef).to_batches()


def _spark_typed(t, tdef: TableDef):
    import pyarrow as pa
    out = {}
    for c, d in tdef.columns:
        s = SPARK_TYPES[np.dtype(d).str[1:]]
        col = t.column(c)
        if s.startswith("decimal"):
            col = pa.array([int(v) for v in col.to_numpy()], pa.decimal128(20, 0))
        elif np.dtype(d).kind == "u":
            col = col.cast({"smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64()}[s])
        out[c] = col
    return pa.table(out)


def table_snapshot(spark, tn_dir, table: str, ts: int):
    """The table at ts as a Spark DataFrame, reconstructed Delta-style by Spark itself: Parquet
    objects and the log tail, filtered by ts, one row per row id (partitioned by row id), minus
    the tombstones. `ts` is checked as in plan_snapshot, before Spark runs."""
    ts = ts_arg("ts", ts)
    from pyspark.sql import functions as F
    plan = plan_snapshot(tn_dir, table, ts)
    names = [c for c, _ in plan.tdef.columns]
    cols = [BLOCK, OFFSET, TS, *names]

    def frame(objs, tables, columns):
        parts = []
        if objs:
            parts.append(spark.read.parquet(*[plan.object_path(n) for n in objs]).select(*columns))
        if tables:
            import pyarrow as pa
            t = pa.concat_tables([x.select(columns) for x in tables])
            if parts:
                t = t.cast(pa.schema([(f.name, f.type) for f in t.schema]))
            parts.append(spark.createDataFrame(t))
        if not parts:
            return None
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        return (df.where(F.col(TS) <= ts)
                .withColumn(ROWID, F.col(BLOCK).cast("long") * BLOCK_ROWS + F.col(OFFSET).cast("long")))

    ins = frame(plan.data_objects, plan.log_inserts, cols)
    if ins is None:
        return spark.createDataFrame([], table_schema(tn_dir, table))
    ins = ins.repartition(ROWID).dropDuplicates([ROWID])
    dels = frame(plan.tombstones, plan.log_deletes, [BLOCK, OFFSET, TS])
    if dels is not None:
        ins = ins.join(dels.select(ROWID), on=ROWID, how="left_anti")
    return ins.select(*[F.col(f"`{c}`") for c in names])
