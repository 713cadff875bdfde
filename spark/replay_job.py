"""partitioned_replay: the pages of a `logtide.replay` directory at a target LSN, replayed by Spark.

Pages are partitioned by owner = murmur3(tag) mod P; a record touching several pages is applied
by each page's owner to that page only. Two plans:

* shuffle: scan tasks (each over a range of log segments; the first also lists the stored pages) emit
  (key, tag, lsn, segment, offset, length) rows as Arrow; `repartition(P, key)` +
  `sortWithinPartitions(tag, lsn)` bring each page's records together in LSN order, and
  `mapInArrow` applies them with the Cython redo.
* pages: no Spark shuffle. Task p finds its pages' LSNs in the LogIndex (its saved tables); the
  WAL meta of the segments the LogIndex does not cover is scanned once, by a first job of scan
  tasks, each dealt an interleaved share of the segments, that write each owner's rows to files
  (ref_exchange.py), which task p then reads, before it applies its pages' records.

Output: a page store in out_dir, written to a temporary sibling and committed by rename with a
manifest (page_output.py).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from logtide.spark.errors import ReplayInputError
from logtide.spark.page_output import abort, commit, temp_dir_for
from logtide.spark.redo_task import PAGE_SCHEMA, ReplayContext, joined_chunks
from logtide.spark.ref_exchange import REFS_DIR
from logtide.spark.replay_input import analyze

SCAN_SCHEMA = ("key int, spc int, db int, rel int, fork int, block int, lsn long, seg int, off long, "
               "len int")
PLANS = ("shuffle", "pages", "auto")


@dataclass
class StageStats:
    name: str
    records: int
    pages: int
    seconds: float

    def line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        return (f"{self.name}: {self.records} records, {self.pages} pages, {self.seconds:.2f} s, "
                f"{rate:,.0f} records/s")


@dataclass
class ReplayResult:
    out_dir: str
    target_lsn: int
    plan: str
    partitions: int
    records: int                # WAL records up to the target in the log segments read
    pages: int                  # pages written
    applied: int                # (page, record) pairs applied (the rest were skipped by page LSN)
    seconds: float
    manifest: dict = field(repr=False, default_factory=dict)
    stages: list = field(default_factory=list)


# ------------------------------------------------------------------ shuffle plan: executor functions

def _scan_fn(ctx: ReplayContext, segments, ranges, base_tags_fn, keys: np.ndarray):
    """Scan task t reads the segments ranges[t] (a contiguous range); task 0 also lists the stored
    pages (rows with segment -1)."""
    def run(batches):
        import pyarrow as pa
        from logtide.spark.log_segments import block_refs, scan_segment
        from logtide.spark.page_owner import owners
        for b in batches:
            for task in b.column(0).to_numpy().tolist():
                parts = [None] if task == 0 else []
                parts += list(range(*ranges[task]))
                for k in parts:
                    if k is None:
                        tags = base_tags_fn()
                        n = len(tags)
                        lsn, seg, off, ln = (np.zeros(n, np.int64), np.full(n, -1, np.int32),
                                             np.zeros(n, np.int64), np.zeros(n, np.int32))
                    else:
                        refs = block_refs(scan_segment(segments[k], records=True), ctx.target_lsn)
                        tags, lsn = refs["tags"], refs["lsn"].astype(np.int64)
                        n = len(lsn)
                        seg = np.full(n, k, np.int32)
                        off, ln = refs["rec_off"], refs["rec_len"].astype(np.int32)
                    if not n:
                        continue
                    key = keys[owners(tags, ctx.partitions)]
                    t = tags.view(np.int32)     # u32 fields travel bit-cast as Spark ints
                    cols = [pa.array(key)] + [pa.array(np.ascontiguousarray(t[:, j])) for j in range(5)]
                    cols += [pa.array(lsn), pa.array(seg), pa.array(off), pa.array(ln)]
                    yield pa.RecordBatch.from_arrays(cols, schema=_scan_arrow_schema())
    return run


def scan_ranges(segments: int, tasks: int) -> list[tuple[int, int]]:
    """Split segment indexes 0..segments-1 into `tasks` contiguous ranges (the first may be empty
    of segments: task 0 also lists the stored pages)."""
    tasks = max(1, min(tasks, segments))
    cuts = np.linspace(0, segments, tasks + 1).round().astype(int)
    return [(int(a), int(z)) for a, z in zip(cuts[:-1], cuts[1:])]


def _scan_arrow_schema():
    import pyarrow as pa
    return pa.schema([("key", pa.int32()), ("spc", pa.int32()), ("db", pa.int32()), ("rel", pa.int32()),
                      ("fork", pa.int32()), ("block", pa.int32()), ("lsn", pa.int64()), ("seg", pa.int32()),
                      ("off", pa.int64()), ("len", pa.int32())])


def _redo_fn(ctx: ReplayContext, keys: np.ndarray):
    """mapInArrow over a shuffled, sorted partition: replay whole pages as their rows arrive."""
    def run(batches):
        from pyspark import TaskContext
        from logtide.spark.page_owner import owners
        from logtide.spark.redo_task import PartitionReplayer
        part = TaskContext.get().partitionId()
        rp = PartitionReplayer(ctx)
        carry = None
        try:
            for b in batches:
                cols = _columns(b)
                if carry is not None:
                    cols = {k: np.concatenate([carry[k], v]) for k, v in cols.items()}
                n = len(cols["lsn"])
                if not n:
                    continue
                tags = cols["tags"]
                own = owners(tags, ctx.partitions)
                if np.any(own != part):
                    raise ReplayInputError(f"partition {part} received a page owned by partition "
                                           f"{int(own[own != part][0])}: Spark's shuffle keys do not match")
                # the last page may continue in the next batch: keep it back
                differ = np.nonzero(np.any(tags != tags[-1], axis=1))[0]
                cut = int(differ[-1]) + 1 if len(differ) else 0
                if cut == 0:
                    carry = cols
                    continue
                carry = {k: v[cut:] for k, v in cols.items()}
                yield from rp.apply(*(cols[k][:cut] for k in ("tags", "lsn", "seg", "off", "len")))
            if carry is not None and len(carry["lsn"]):
                yield from rp.apply(*(carry[k] for k in ("tags", "lsn", "seg", "off", "len")))
        finally:
            rp.close()
    return run


def _columns(b) -> dict:
    t = np.empty((b.num_rows, 5), np.int32)
    for j, name in enumerate(("spc", "db", "rel", "fork", "block")):
        t[:, j] = b.column(name).to_numpy()
    return {"tags": t.view(np.uint32), "lsn": b.column("lsn").to_numpy(), "seg": b.column("seg").to_numpy(),
            "off": b.column("off").to_numpy(), "len": b.column("len").to_numpy()}


# ------------------------------------------------------------------ pages plan: executor functions

def _ref_scan_fn(segments, shares: list[list[int]], refs_dir: str, target_lsn: int, upto: int,
                 first_needed: int, partitions: int):
    """Scan task t reads the WAL meta of the segments shares[t] (their indexes) and writes each
    owner's rows to the refs directory; it returns (t, row count per owner)."""
    def run(tasks):
        from logtide.spark import worker_maps
        from logtide.spark.page_lsns import scan_rows
        from logtide.spark.ref_exchange import write_refs
        for task in tasks:
            rows = scan_rows(segments, shares[task], target_lsn, upto, first_needed, worker_maps.for_scan(refs_dir))
            yield task, write_refs(refs_dir, task, rows, partitions)
    return run


def _pages_fn(ctx: ReplayContext, segments, index_dir: str, first_needed: int, upto: int, base_tags_fn,
              refs_dir: str | None, counts: dict):
    """Redo task p: its rows from the LogIndex, from the scan tasks' files and the stored pages it
    owns, sorted by page then LSN, applied and written; returns a PageChunk per chunk of pages."""
    def run(parts):
        from logtide.spark import worker_maps
        from logtide.spark.log_segments import SegmentMaps
        from logtide.spark.page_lsns import base_rows, index_rows, sorted_rows
        from logtide.spark.redo_task import PartitionReplayer
        from logtide.spark.ref_exchange import read_refs
        P = ctx.partitions
        # the segments a scan task of this job mapped in this worker, still faulted in
        maps = worker_maps.take(refs_dir) if refs_dir is not None else SegmentMaps()
        try:
            for part in parts:
                found = [index_rows(segments, index_dir, first_needed, upto, part, P, maps),
                         base_rows(base_tags_fn(), part, P)]
                if refs_dir is not None:
                    found += read_refs(refs_dir, part, counts[part])
                rp = PartitionReplayer(ctx, maps)
                try:
                    yield from rp.chunks(*sorted_rows(found))
                finally:
                    rp.close()
        finally:
            maps.close()
    return run


def dealt_shares(sizes, tasks: int) -> list[list[int]]:
    """Deal items 0..n-1, in order, to min(tasks, n) shares: each item to the share with the fewest
    bytes so far (the lowest on a tie). Shares then hold about equal bytes (they differ by at most
    one item's size), and each holds items from all along the log: a segment's scan cost follows
    its records as well as its bytes, and the records per byte drift along a log, so contiguous
    ranges of equal bytes can differ in work (docs/spark.md has the measurements)."""
    n = len(sizes)
    tasks = max(1, min(tasks, n))
    shares: list[list[int]] = [[] for _ in range(tasks)]
    load = [0] * tasks
    for i, size in enumerate(sizes):
        t = min(range(tasks), key=load.__getitem__)
        shares[t].append(i)
        load[t] += size
    return shares


# ------------------------------------------------------------------ driver

_ERR = re.compile(r"(logtide\.[\w.]+\.)?(\w+Error): (.*)")


def _typed(exc: Exception) -> Exception:
    """The logtide error a failed task raised, re-raised on the driver with its one-line message."""
    from logtide import errors as base
    from logtide.spark import errors as sp
    text = str(exc)
    for line in reversed(text.splitlines()):
        m = _ERR.search(line.strip())
        if m:
            cls = getattr(sp, m.group(2), None) or getattr(base, m.group(2), None)
            if isinstance(cls, type) and issubclass(cls, base.LogtideError):
                return cls(m.group(3))
    return exc


AUTO_PAGES_MAX_PARTITIONS = 8


def choose_plan(partitions: int) -> str:
    """auto: the pages plan up to 8 partitions, the shuffle plan above. Each pages-plan redo task
    reads the LogIndex's saved tables of the whole range and the files of every scan task, so its
    fixed work grows with P, while the shuffle plan pays the shuffle (docs/spark.md has the
    measurements)."""
    return "pages" if partitions <= AUTO_PAGES_MAX_PARTITIONS else "shuffle"


def _shuffle_plan(spark, ctx: ReplayContext, segs, base_tags) -> tuple:
    """Run the shuffle plan; returns the written pages' (tags, page LSNs, CRC-32Cs, applied)."""
    from logtide.spark.page_owner import spark_keys
    P = ctx.partitions
    keys = spark_keys(P)
    # a few scan tasks per core, each over a range of segments: per-task overhead stays small
    ranges = scan_ranges(len(segs), 2 * spark.sparkContext.defaultParallelism)
    ids = spark.range(0, len(ranges), numPartitions=len(ranges))
    scan = ids.mapInArrow(_scan_fn(ctx, segs, ranges, base_tags, keys), SCAN_SCHEMA)
    shuffled = scan.repartition(P, "key").sortWithinPartitions("spc", "db", "rel", "fork", "block", "lsn")
    out = shuffled.mapInArrow(_redo_fn(ctx, keys), PAGE_SCHEMA)
    try:
        table = out.toArrow()
    except Exception as exc:
        raise _typed(exc) from None
    if not table.num_rows:
        return np.empty((0, 5), np.uint32), np.empty(0, np.int64), np.empty(0, np.uint32), 0
    tags = np.stack([table.column(c).to_numpy().astype(np.uint32) for c in ("spc", "db", "rel", "fork", "block")],
                    axis=1)
    return (tags, table.column("page_lsn").to_numpy(), table.column("crc").to_numpy().astype(np.uint32),
            int(table.column("applied").to_numpy().sum()))


def _pages_plan(spark, ctx: ReplayContext, inp, segs, tmp: str, base_tags):
    """Run the pages plan; returns its PageChunks and the scan stage's stats (None when the
    LogIndex covers every segment).

    The segments the LogIndex does not cover are scanned first, once: a Spark job of scan tasks,
    each dealt an interleaved share of them of about equal bytes, writes each owner's rows to files
    (ref_exchange.py); then redo task p reads its files. Both jobs are RDD jobs of a few Python
    objects per task (task ids in, row counts and per-chunk numpy arrays out): no DataFrame plan
    is compiled and no row passes through the JVM."""
    from logtide.spark.page_lsns import index_coverage, scanned_segments
    sc = spark.sparkContext
    P, target = ctx.partitions, ctx.target_lsn
    first_needed = max(inp.consistent_lsn + 1, segs[0].first_lsn)
    upto = min(index_coverage(inp.index_dir, first_needed), target)
    indexes = scanned_segments(segs, upto)
    refs_dir, counts, stage = None, {}, None
    if indexes:
        t0 = time.perf_counter()
        refs_dir = os.path.join(tmp, REFS_DIR)
        os.mkdir(refs_dir)
        dealt = dealt_shares([os.path.getsize(segs[k].path) for k in indexes], P)
        shares = [[indexes[i] for i in share] for share in dealt]
        scan = sc.parallelize(range(len(shares)), len(shares))
        try:
            listing = scan.mapPartitions(_ref_scan_fn(segs, shares, refs_dir, target, upto, first_needed,
                                                      P)).collect()
        except Exception as exc:
            raise _typed(exc) from None
        counts = {p: {task: int(c[p]) for task, c in listing} for p in range(P)}
        if sorted(task for task, _ in listing) != list(range(len(shares))):
            raise ReplayInputError(f"the scan stage reported tasks {sorted(t for t, _ in listing)}, not one "
                                   f"result from each of its {len(shares)} tasks")
        rows = sum(int(c.sum()) for _, c in listing)
        # its records are the block references found (a record touching two pages counts twice)
        stage = StageStats(f"scan (pages, {len(shares)} tasks over {len(indexes)} segments, block references)",
                           rows, 0, time.perf_counter() - t0)
    redo = sc.parallelize(range(P), P)
    try:
        chunks = redo.mapPartitions(_pages_fn(ctx, segs, inp.index_dir, first_needed, upto, base_tags, refs_dir,
                                              counts)).collect()
    except Exception as exc:
        raise _typed(exc) from None
    return chunks, stage


def partitioned_replay(spark, data_dir, target_lsn: int, out_dir, *, partitions: int | None = None,
                       plan: str = "auto") -> ReplayResult:
    """Replay data_dir up to target_lsn on Spark and commit the pages as a page store in out_dir."""
    if plan not in PLANS:
        raise ReplayInputError(f"plan is one of {PLANS}, got {plan!r}")
    # int() floored 2.7 to 2 and parsed "3"; `or` took 0 as the default
    if partitions is not None and (not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1):
        raise ReplayInputError(f"partitions must be None or an int >= 1, got {partitions!r}")
    t0 = time.perf_counter()
    inp = analyze(data_dir, target_lsn)
    P = partitions if partitions is not None else int(spark.sparkContext.defaultParallelism)
    if plan == "auto":
        plan = choose_plan(P)
    tmp = temp_dir_for(os.fspath(out_dir))
    segs = inp.segments
    ctx = ReplayContext(tuple(s.path for s in segs), inp.pages_dir, target_lsn, tmp, P)
    relations = inp.relations

    def base_tags():
        from logtide.spark.replay_input import ReplayInput
        return ReplayInput(inp.data_dir, target_lsn, [], 0, 0, relations).base_tags()

    stages = []
    try:
        if plan == "shuffle":
            tags, lsns, crcs, applied = _shuffle_plan(spark, ctx, segs, base_tags)
        else:
            chunks, scan_stage = _pages_plan(spark, ctx, inp, segs, tmp, base_tags)
            if scan_stage is not None:
                stages.append(scan_stage)
            tags, lsns, crcs, applied = joined_chunks(chunks)
        if len(np.unique(tags, axis=0)) != len(tags):
            raise ReplayInputError("a page was replayed by two partitions")
        shutil.rmtree(os.path.join(tmp, REFS_DIR), ignore_errors=True)     # the pages plan's exchange files
        replay_s = time.perf_counter() - t0
        manifest = commit(tmp, os.fspath(out_dir), tags, lsns, crcs, target_lsn=target_lsn, plan=plan, partitions=P)
    except BaseException:
        abort(tmp)
        raise
    seconds = time.perf_counter() - t0
    records = max(0, target_lsn - segs[0].first_lsn + 1)
    stages.append(StageStats(f"replay ({plan}, {P} partitions)", records, len(tags), replay_s))
    stages.append(StageStats("commit", 0, len(tags), seconds - replay_s))
    return ReplayResult(os.fspath(out_dir), target_lsn, plan, P, records, len(tags), applied, seconds, manifest,
                        stages)
