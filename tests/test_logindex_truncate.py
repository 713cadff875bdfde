"""LogIndex truncation: whole table files below an LSN go, meta first, never the last saved table."""
import shutil

import numpy as np

from logtide import LogIndex
from logtide.logindex.meta_file import read_meta
from logtide.logindex.table_format import TABLES_PER_FILE, bloom_file_name, table_file_name


def _build(path, n=1200):
    li = LogIndex.open(path, max_segments=2, ring_size=2)
    tags = np.zeros((n, 5), np.uint32)
    tags[:, 0], tags[:, 1], tags[:, 2] = 1663, 5, 16384
    tags[:, 4] = np.arange(n) % 97
    li.insert_many(tags, np.arange(1, n + 1, dtype=np.uint64))
    li.flush(include_active=True)
    return li, tags


def _files(path):
    return sorted(p.name for p in path.iterdir() if p.suffix in (".tbl", ".bloom"))


def test_truncate_removes_whole_files_below_lsn(tmp_path):
    li, tags = _build(tmp_path)
    meta = li.meta
    nfiles = meta.max_table_id // TABLES_PER_FILE + 1
    assert nfiles >= 4, meta
    # the max LSN of file 1 (tables 64..127): truncating just above it removes files 0 and 1
    cut = int(li._tmax[2 * TABLES_PER_FILE - 1]) + 1
    assert li.truncate(cut) == 2
    assert table_file_name(0) not in _files(tmp_path) and table_file_name(1) not in _files(tmp_path)
    assert table_file_name(2) in _files(tmp_path)
    m = read_meta(tmp_path)
    assert (m.min_table_id, m.min_segment) == (2 * TABLES_PER_FILE, 2) and m.start_lsn == cut
    for b in range(97):
        want = [l for l in range(b + 1, 1201, 97) if l >= cut]
        assert li.lsns((1663, 5, 16384, 0, b)).tolist() == want
    assert [l for l, _ in li.iter_lsn()] == list(range(cut, 1201))
    # truncating everything keeps the file holding the last saved table
    li.truncate(2**64 - 1)
    assert _files(tmp_path) == [bloom_file_name(nfiles - 1), table_file_name(nfiles - 1)]
    assert li.lsns((1663, 5, 16384, 0, (1200 - 1) % 97)).tolist()[-1] == 1200
    li.close()
    # a reopened primary and an RO reader agree
    for mode in ("primary", "ro"):
        again = LogIndex.open(tmp_path, mode=mode)
        assert again.meta == read_meta(tmp_path)
        assert again.lsns((1663, 5, 16384, 0, (1200 - 1) % 97)).tolist()[-1] == 1200
        again.close()


def test_crash_between_meta_and_delete_is_finished_at_open(tmp_path):
    li, _ = _build(tmp_path)
    saved = tmp_path.parent / "saved"
    shutil.copytree(tmp_path, saved)
    li.truncate(int(li._tmax[TABLES_PER_FILE - 1]) + 1)
    li.close()
    # put the deleted files back: as if the process died after the meta rename, before unlink
    for name in (table_file_name(0), bloom_file_name(0)):
        shutil.copy(saved / name, tmp_path / name)
    ro = LogIndex.open(tmp_path, mode="ro")       # RO ignores them (never deletes)
    assert (tmp_path / table_file_name(0)).exists()
    assert ro.lsns((1663, 5, 16384, 0, 0)).tolist()[0] > int(ro.start_lsn) - 1
    ro.close()
    li = LogIndex.open(tmp_path)                   # the primary finishes the job
    assert not (tmp_path / table_file_name(0)).exists()
    assert all(l >= li.start_lsn for l in li.lsns((1663, 5, 16384, 0, 0)).tolist())
    li.close()


def test_truncate_on_empty_and_below_everything(tmp_path):
    li = LogIndex.open(tmp_path)
    assert li.truncate(100) == 0
    li.insert((1, 2, 3, 0, 4), 10)
    li.flush(include_active=True)
    assert li.truncate(5) == 0 and li.truncate(2**64 - 1) == 0
    assert li.lsns((1, 2, 3, 0, 4)).tolist() == [10]
    li.close()
