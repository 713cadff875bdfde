"""pg_waldump's text, parsed in Python: the reference the PostgreSQL tests compare the Spark
sources with, and the baseline of the pg_changed_pages benchmark (what a script does without
logtide)."""
from __future__ import annotations

import re
import subprocess

LINE = re.compile(r"rmgr: (\w+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+)/([0-9A-F]+)")
BLK = re.compile(r"blkref #(\d+): rel (\d+)/(\d+)/(\d+)(?: fork (\w+))? blk (\d+)( FPW)?")
FORKS = {"main": 0, "fsm": 1, "vm": 2, "init": 3}
# PostgreSQL 15's resource managers, by the name pg_waldump prints
RMGR_IDS = {name: i for i, name in enumerate((
    "XLOG", "Transaction", "Storage", "CLOG", "Database", "Tablespace", "MultiXact", "RelMap", "Standby", "Heap2",
    "Heap", "Btree", "Hash", "Gin", "Gist", "Sequence", "SPGist", "BRIN", "CommitTs", "ReplicationOrigin",
    "Generic", "LogicalMessage"))}


def waldump_records(pg_bin, wal_dir, first_segment: str, last_segment: str | None = None, *,
                    timeout: float = 300) -> tuple[dict, str]:
    """{lsn: (rmid, tot_len, xid, [((spc, db, rel, fork, block), fpw)...])} and pg_waldump's stderr.
    Without last_segment pg_waldump reads the first segment only."""
    cmd = [f"{pg_bin}/pg_waldump", "-p", str(wal_dir), first_segment] + ([last_segment] if last_segment else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = {}
    for line in p.stdout.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        blocks = [((int(b[1]), int(b[2]), int(b[3]), FORKS[b[4] or "main"], int(b[5])), bool(b[6]))
                  for b in BLK.findall(line)]
        lsn = (int(m.group(5), 16) << 32) | int(m.group(6), 16)
        out[lsn] = (RMGR_IDS[m.group(1)], int(m.group(3)), int(m.group(4)), blocks)
    return out, p.stderr


def changed_pages_map(records: dict, from_lsn: int, to_lsn: int) -> dict:
    """{tag: [first_lsn, last_lsn, records]} over pg_waldump records with from_lsn <= lsn < to_lsn."""
    out: dict = {}
    for lsn in sorted(records):
        if not from_lsn <= lsn < to_lsn:
            continue
        for tag, _ in records[lsn][3]:
            e = out.get(tag)
            if e is None:
                out[tag] = [lsn, lsn, 1]
            else:
                e[1] = lsn
                e[2] += 1
    return out
