"""`logtide logindex build|query` on real PostgreSQL WAL, and the demo stage."""
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from logtide.logindex.pgcluster import make_pgbench_wal, pg_available
from logtide.logindex.pgwal import PgWalReader, format_lsn
from logtide_cli import logtide_cmd


@pytest.mark.skipif(pg_available() is not None, reason=str(pg_available()))
@pytest.mark.timeout(240)
def test_build_and_query_pg_wal(tmp_path):
    work = Path(tempfile.mkdtemp(prefix="logtide-cli-pg-", dir="/tmp"))
    try:
        wal = make_pgbench_wal(work, scale=1, seconds=1)
        out = tmp_path / "idx"
        p = subprocess.run(logtide_cmd() + ["logindex", "build", "--pg-wal", str(wal), "--out", str(out)],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert "segment 1/" in p.stdout and "WAL ends at" in p.stdout
        batch = PgWalReader(wal).read_all()
        # the most-changed page: its LSNs, as PostgreSQL prints them
        tags, counts = np.unique(batch.tags, axis=0, return_counts=True)
        tag = tags[counts.argmax()]
        want = sorted({int(l) for l, t in zip(batch.lsn, batch.tags) if (t == tag).all()})
        text = "/".join(map(str, tag.tolist()))
        p = subprocess.run(logtide_cmd() + ["logindex", "query", "--dir", str(out), "--tag", text, "--stats"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0] == f"page {text}: {len(want)} LSNs" and lines[1:] == [format_lsn(l) for l in want]
        assert "bloom skip rate" in p.stderr
        # pages changed between two LSNs (incremental backup)
        lo, hi = want[len(want) // 3], want[-1]
        p = subprocess.run(logtide_cmd() + ["logindex", "query", "--dir", str(out), "--from", format_lsn(lo),
                                         "--to", format_lsn(hi)], capture_output=True, text=True, timeout=60)
        sel = (batch.lsn >= lo) & (batch.lsn <= hi)
        pages = {"/".join(map(str, t)) for t in map(tuple, batch.tags[sel].tolist())}
        assert p.stdout.splitlines()[0].startswith(f"{len(pages)} pages changed")
        assert {l.split("\t")[0] for l in p.stdout.splitlines()[1:]} == pages
        # building again skips what is saved
        p = subprocess.run(logtide_cmd() + ["logindex", "build", "--pg-wal", str(wal), "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and "already indexed" in p.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_query_errors_are_clear(tmp_path):
    p = subprocess.run(logtide_cmd() + ["logindex", "query", "--dir", str(tmp_path / "none"), "--tag", "1/2/3/0/4"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = subprocess.run(logtide_cmd() + ["logindex", "query", "--dir", str(tmp_path), "--tag", "1/2/x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "spc/db/rel/fork/block" in p.stderr
    p = subprocess.run(logtide_cmd() + ["logindex", "build", "--pg-wal", str(tmp_path), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "no WAL segment files" in p.stderr


@pytest.mark.timeout(300)
def test_demo_logindex_stage(tmp_path):
    p = subprocess.run(logtide_cmd() + ["demo", "--only", "logindex", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "logindex: PASS" in p.stdout and "bloom skip rate" in p.stdout
