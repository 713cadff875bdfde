"""A flush that fails part-way loses nothing: the rows it was writing stay in memory, the next flush
writes them, and a checkpoint after it (which truncates the log) leaves every committed row in
objects or in the log. The objects it did write, which no FLUSH record names, are removed."""
import shutil

import pytest

from logtide.engine.logservice import LogService
from logtide.engine.logtail import ComputeNode, TransactionNode
from logtide.engine.objectstore import ObjectStore, ObjectStoreError
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


class FailingStore(ObjectStore):
    """A real object store whose `fail_at`-th object write fails, as a full or broken disk would."""

    def __init__(self, root, fail_at: int) -> None:
        super().__init__(root)
        self.writes, self.fail_at = 0, fail_at

    def write_blocks(self, name, blocks):
        self.writes += 1
        if self.writes == self.fail_at:
            raise ObjectStoreError(f"injected: object {name!r} could not be written")
        return super().write_blocks(name, blocks)


def test_a_flush_failing_part_way_leaves_no_object_behind(tmp_path):
    """Two tables: the first one's object is written, the second one's fails. No FLUSH record names
    the first object, so it is removed; the next flush writes both tables' rows."""
    store = FailingStore(tmp_path / "objects", fail_at=2)
    tn = TransactionNode(LogService.open(tmp_path / "log"), store)
    for t in ("a", "b"):
        tn.create_table(t, {"id": "int64", "v": "int64"}, "id")
        x = tn.begin()
        x.insert(t, {"id": list(range(20)), "v": list(range(20))})
        x.commit()
    with pytest.raises(ObjectStoreError):
        tn.flush()
    assert [n for n in store.list() if n.endswith(".parquet")] == [], "an object no record names was left"
    tn.checkpoint_now()
    tn.close()
    tn.log.close()
    tn = TransactionNode.open(tmp_path)
    for t in ("a", "b"):
        cn = ComputeNode(lambda: tn.connect("cn"), tn.store)
        cn.subscribe(t)
        assert sorted(r["id"] for r in cn.read(t, tn.last_ts).to_pylist()) == list(range(20))
        cn.close()
    tn.close()
