"""A flush that fails part-way (here the object store's directory is gone while it writes) loses
nothing: the rows it was writing stay in memory, the next flush writes them, and a checkpoint
after it (which truncates the log) leaves every committed row in objects or in the log."""
import shutil

import pytest

from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.errors import LogtideError


def _commit(tn, ids):
    x = tn.begin()
    x.insert("t", {"id": ids, "v": [i * 3 for i in ids]})
    return x.commit()


def _rows(tn):
    cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
    try:
        cn.subscribe("t")
        return {r["id"]: r["v"] for r in cn.read("t", tn.last_ts).to_pylist()}
    finally:
        cn.close()


def test_a_failed_flush_loses_no_rows(tmp_path):
    objects = tmp_path / "objects"
    tn = TransactionNode.open(tmp_path)          # log in tmp_path/log, objects in tmp_path/objects
    tn.create_table("t", {"id": "int64", "v": "int64"}, "id")
    for i in range(0, 100, 10):
        _commit(tn, list(range(i, i + 10)))
    shutil.rmtree(objects)
    objects.write_bytes(b"not a directory")      # every object write fails
    with pytest.raises(LogtideError):
        tn.flush()
    objects.unlink()
    objects.mkdir()
    _commit(tn, list(range(100, 150)))
    tn.checkpoint_now()                          # flush, checkpoint, truncate the log
    assert tn.log.get_truncated_lsn() > 0
    expected = {i: i * 3 for i in range(150)}
    assert _rows(tn) == expected
    tn.close()

    tn = TransactionNode.open(tmp_path)          # the same log and objects, reopened
    assert _rows(tn) == expected, "rows of the failed flush are gone after the checkpoint"
    tn.close()
