"""Damaged LogIndex files: detected with a clear error, or ignored where that is safe; never wrong LSNs."""
import os

import numpy as np
import pytest

from logtide import LogIndex
from logtide.errors import CorruptBlockError, CorruptionError
from logtide.logindex import CorruptMetaError
from logtide.logindex.table_format import (BLOOM_BLOCK, META_NAME, SLOT_SIZE, TABLE_HEADER, bloom_file_name,
                                           table_file_name)

N = 600


def _build(path):
    li = LogIndex.open(path, max_segments=8, ring_size=2)
    tags = np.zeros((N, 5), np.uint32)
    tags[:, 0], tags[:, 1], tags[:, 2] = 1663, 5, 16384
    tags[:, 4] = np.arange(N) % 50
    li.insert_many(tags, np.arange(1, N + 1, dtype=np.uint64))
    li.flush(include_active=True)
    li.close()
    return {b: list(range(b + 1, N + 1, 50)) for b in range(50)}


def _flip(path, offset, mask=0x20):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def _tag(b):
    return (1663, 5, 16384, 0, b)


def _check_never_wrong(li, want):
    """Each lookup either raises a CorruptionError or returns exactly the right LSNs."""
    errors = 0
    for b, lsns in want.items():
        try:
            got = li.lsns(_tag(b)).tolist()
        except CorruptionError:
            errors += 1
            continue
        assert got == lsns
    return errors


@pytest.mark.parametrize("where", ["header", "image", "crc"])
def test_flipped_table_byte_is_detected(tmp_path, where):
    want = _build(tmp_path)
    off = {"header": 4, "image": TABLE_HEADER.size + 200, "crc": None}[where]
    slot = 3 * SLOT_SIZE
    if off is None:
        with open(tmp_path / table_file_name(0), "rb") as f:
            f.seek(slot + 4)
            length = int.from_bytes(f.read(4), "little")
        off = TABLE_HEADER.size + length
    _flip(tmp_path / table_file_name(0), slot + off)
    li = LogIndex.open(tmp_path)
    errors = _check_never_wrong(li, want)
    assert errors > 0  # table 3 holds some of these tags
    with pytest.raises(CorruptBlockError, match="table 3"):
        list(li.iter_lsn())
    li.close()


def test_truncated_table_file_is_detected(tmp_path):
    want = _build(tmp_path)
    path = tmp_path / table_file_name(0)
    os.truncate(path, 5 * SLOT_SIZE + 100)
    li = LogIndex.open(tmp_path, mode="ro")
    assert _check_never_wrong(li, want) > 0
    with pytest.raises(CorruptBlockError, match="truncated"):
        list(li.iter_lsn())


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damaged_bloom_is_ignored_safely(tmp_path, damage):
    want = _build(tmp_path)
    path = tmp_path / bloom_file_name(0)
    if damage == "flip":
        _flip(path, 2 * BLOOM_BLOCK + 1000)
    elif damage == "truncate":
        os.truncate(path, 2 * BLOOM_BLOCK + 100)
    else:
        path.unlink()
    li = LogIndex.open(tmp_path)
    assert _check_never_wrong(li, want) == 0   # the table is read instead of skipped
    st = li.stats()
    assert st["corrupt_blooms"] >= 1
    assert [l for l, _ in li.iter_lsn()] == list(range(1, N + 1))
    li.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "extend"])
def test_damaged_meta_is_a_clear_error(tmp_path, damage):
    _build(tmp_path)
    path = tmp_path / META_NAME
    data = path.read_bytes()
    if damage == "flip":
        for i in range(len(data)):
            bad = bytearray(data)
            bad[i] ^= 0x01
            path.write_bytes(bytes(bad))
            with pytest.raises(CorruptMetaError):
                LogIndex.open(tmp_path)
        return
    path.write_bytes({"truncate": data[:-3], "empty": b"", "extend": data + b"\0"}[damage])
    for mode in ("primary", "ro"):
        with pytest.raises(CorruptMetaError, match="meta"):
            LogIndex.open(tmp_path, mode=mode)


def test_uncommitted_slot_garbage_is_ignored_then_overwritten(tmp_path):
    want = _build(tmp_path)
    li = LogIndex.open(tmp_path)
    next_id = li.meta.max_table_id + 1
    li.close()
    # a torn flush: garbage in the next slot and bloom block, meta never updated
    with open(tmp_path / table_file_name(0), "r+b") as f:
        f.seek(next_id * SLOT_SIZE)
        f.write(os.urandom(5000))
    with open(tmp_path / bloom_file_name(0), "r+b") as f:
        f.seek(next_id * BLOOM_BLOCK)
        f.write(os.urandom(BLOOM_BLOCK))
    (tmp_path / (META_NAME + ".tmp")).write_bytes(b"torn")
    li = LogIndex.open(tmp_path)
    assert _check_never_wrong(li, want) == 0
    assert not (tmp_path / (META_NAME + ".tmp")).exists()
    li.insert(_tag(7), N + 1)
    li.flush(include_active=True)
    li.close()
    li = LogIndex.open(tmp_path, mode="ro")
    assert li.lsns(_tag(7)).tolist() == want[7] + [N + 1]
    assert li.stats()["corrupt_blooms"] == 0
