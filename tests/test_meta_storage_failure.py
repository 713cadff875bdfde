"""A meta-service whose disk refuses writes: `logtide meta serve` runs with a file-size limit
(RLIMIT_FSIZE, so its log writes fail with EFBIG, as on a full disk). The upsert that meets it ends
in MetaStorageFailed (a MetaError, and a GroupCommitFailed); later upserts are refused at once, and
reads go on. Restarted without the limit, the service has every acknowledged write."""
import os
import re
import resource
import subprocess
import sys
import time

import pytest

from logtide.engine.meta.client import connect_meta
from logtide.errors import GroupCommitFailed, MetaError, MetaStorageFailed

LOGTIDE = os.path.join(os.path.dirname(sys.executable), "logtide")
LIMIT = 4 << 20        # bytes a file of the server may grow to (its log segments are larger)


def _serve(tmp_path, name, limit=None):
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    log = tmp_path / f"{name}.log"
    p = subprocess.Popen([LOGTIDE, "meta", "serve", "--dir", str(tmp_path / "meta"), "--listen", "127.0.0.1:0"],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT, preexec_fn=cap if limit else None)
    end = time.monotonic() + 60
    while not (m := re.search(r"listening on (127\.0\.0\.1:\d+)", log.read_text(errors="replace"))):
        assert p.poll() is None and time.monotonic() < end, log.read_text(errors="replace")
        time.sleep(0.05)
    return p, m.group(1)


@pytest.mark.timeout(120)
def test_a_full_disk_refuses_writes_with_a_typed_error_and_loses_no_acknowledged_one(tmp_path):
    p, addr = _serve(tmp_path, "limited", LIMIT)
    value = b"v" * 50_000
    acked = []
    try:
        c = connect_meta(addr, timeout=10)
        with pytest.raises(MetaStorageFailed) as err:
            for i in range(10 * LIMIT // len(value)):
                c.upsert(f"k{i:05d}", value)
                acked.append(f"k{i:05d}")
        assert isinstance(err.value, MetaError) and isinstance(err.value, GroupCommitFailed)
        assert acked, "the limit was met before any write"
        t0 = time.monotonic()
        with pytest.raises(MetaStorageFailed):
            c.upsert("after", b"x")
        assert time.monotonic() - t0 < 2, "a failed service waited before refusing"
        assert c.get(acked[0]).data == value and p.poll() is None, "reads go on"
        c.close()
    finally:
        p.terminate()
        p.wait(30)

    p, addr = _serve(tmp_path, "restarted")
    try:
        c = connect_meta(addr, timeout=10)
        got = {k: v.data for k, v in c.list("k")}
        assert all(got.get(k) == value for k in acked), "an acknowledged write is gone"
        assert set(got) <= set(acked) | {f"k{len(acked):05d}"}, "a write nobody made"   # the failed one: either
        assert c.get("after") is None
        c.upsert("after", b"x")
        assert c.get("after").data == b"x"
        c.close()
    finally:
        p.terminate()
        p.wait(30)
