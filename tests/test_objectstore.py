"""The object store: Parquet objects with one row group per block, small objects, bad names, corruption."""
import numpy as np
import pyarrow as pa
import pytest

from logtide.engine.objectstore import BLOCK_ROWS, ObjectStore, ObjectStoreError
from logtide.errors import CorruptionError


def test_blocks_are_row_groups(tmp_path):
    store = ObjectStore(tmp_path / "objs")
    blocks = [pa.table({"a": np.arange(n, dtype=np.int64)}) for n in (BLOCK_ROWS, 10, 3000)]
    size = store.write_blocks("o1.parquet", blocks)
    assert size > 0 and store.exists("o1.parquet") and store.num_blocks("o1.parquet") == 3
    assert store.read_block("o1.parquet", 1).column("a").to_pylist() == list(range(10))
    assert store.read_all("o1.parquet").num_rows == BLOCK_ROWS + 3010
    with pytest.raises(ObjectStoreError):
        store.write_blocks("o2.parquet", [pa.table({"a": np.arange(BLOCK_ROWS + 1)})])
    assert store.list() == ["o1.parquet"]


def test_uri_form_and_small_objects(tmp_path):
    store = ObjectStore(f"file://{tmp_path}/uri")
    store.put("ckp-1", b"hello")
    assert store.get("ckp-1") == b"hello" and store.list("ckp") == ["ckp-1"]
    with pytest.raises(ObjectStoreError):
        store.get("missing")
    with pytest.raises(ObjectStoreError):
        store.path("../escape")


def test_corrupt_object_is_a_typed_error(tmp_path):
    store = ObjectStore(tmp_path)
    store.write_blocks("o.parquet", [pa.table({"a": np.arange(100)})])
    p = tmp_path / "o.parquet"
    p.write_bytes(p.read_bytes()[:40])
    with pytest.raises(CorruptionError):
        store.read_block("o.parquet", 0)
