"""The control file (atomic, CRC-checked) and the primary's meta queue."""
import threading
import time

import pytest

from logtide.errors import CorruptionError
from logtide.replay.control_file import Control, read_control, write_control
from logtide.replay.meta_queue import MetaQueue


def test_control_file_roundtrip_and_corruption(tmp_path):
    assert read_control(tmp_path) == Control(0, 1)
    write_control(tmp_path, Control(12345, 77))
    assert read_control(tmp_path) == Control(12345, 77)
    write_control(tmp_path, Control(2**63, 1))
    assert read_control(tmp_path) == Control(2**63, 1)
    raw = (tmp_path / "control").read_bytes()
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1
        (tmp_path / "control").write_bytes(bytes(bad))
        if i >= 28:  # the reserved word is not covered; everything else is
            continue
        with pytest.raises(CorruptionError):
            read_control(tmp_path)
    (tmp_path / "control").write_bytes(raw[:20])
    with pytest.raises(CorruptionError):
        read_control(tmp_path)
    assert not (tmp_path / "control.tmp").exists()


def test_meta_queue_positions_trim_and_wait():
    q = MetaQueue(capacity=100)
    for l in range(1, 51):
        q.push(l, b"m%d" % l)
    lsns, metas = q.read(10, 5, 0)
    assert lsns == [10, 11, 12, 13, 14] and metas[0] == b"m10"
    q.trim(20)
    assert q.first_lsn() == 20 and q.read(5, 5, 0) is None  # older than the queue: read the log
    assert q.read(51, 5, 0.05) == ([], [])                   # nothing yet: empty after the wait
    got = []
    t = threading.Thread(target=lambda: got.append(q.read(51, 5, 5)))
    t.start()
    time.sleep(0.05)
    q.push(51, b"late")
    t.join(5)
    assert got == [([51], [b"late"])]
    for l in range(52, 300):
        q.push(l, b"x")
    assert len(q) == 100 and q.first_lsn() == 200  # bounded
