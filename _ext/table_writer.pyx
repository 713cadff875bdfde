# cython: language_level=3
"""The I/O of a LogIndex flush: each memtable's table slot and bloom block, written without the GIL.

    blooms = write_tables(memtables, places, expected_elements, fsync_fds, new_in_dir)
    # places[i] = (table fd, slot offset, bloom fd, bloom offset) of memtables[i]; then every fd
    # of fsync_fds is fsynced, and the directory new_in_dir (None: none) when files were created

A slot is [magic u32][image length u32][table id u64][memtable image][crc32c u32 of all before]
(docs/logindex_format.md); the bloom block holds every tag of the memtable. The whole batch runs in
one GIL-free pass, so a flush thread beside a Python loop of inserts does not wait for the GIL per
table. A failed write or fsync raises OSError; what was written before it stays.
"""
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

from logtide._ext.bloom4k cimport Bloom4K, BLOOM_BLOCK_SIZE, bloom_add_tags, bloom_write_block
from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.le_bytes cimport put_le
from logtide._ext.durable_io cimport fsync_dir_path, pwrite_all
from logtide._ext.memtable cimport (HEAD_TAG, ITEM_KIND, KIND_HEAD, MT_SEG_BYTES, MT_SEGMENTS, Memtable, MemtableData,
                                    image_size, write_image)

import os

from logtide.logindex.table_format import TABLE_HEADER, TABLE_MAGIC

cdef enum:
    SLOT_HEAD = 16              # TABLE_HEADER: magic u32, image length u32, table id u64
    TABLE_MAGIC_ = 0x42544C54   # "TLTB", as table_format.TABLE_MAGIC

assert TABLE_HEADER.size == SLOT_HEAD and TABLE_MAGIC == TABLE_MAGIC_


cdef extern from "<unistd.h>" nogil:
    int fsync(int fd)


cdef int _write_one(MemtableData* d, uint8_t* bits, int k, uint64_t min_lsn, uint64_t max_lsn,
                    const int64_t* place, uint8_t* buf, uint8_t* block) noexcept nogil:
    cdef const uint8_t* tags[MT_SEGMENTS]
    cdef Py_ssize_t n = image_size(d), sid, nt = 0
    cdef const uint8_t* s
    cdef int rc
    put_le(buf, TABLE_MAGIC_, 4)
    put_le(buf + 4, <uint64_t>n, 4)
    put_le(buf + 8, d.table_id, 8)
    write_image(d, buf + SLOT_HEAD)
    put_le(buf + SLOT_HEAD + n, crc32c_update(0, buf, SLOT_HEAD + n), 4)
    rc = pwrite_all(<int>place[0], buf, SLOT_HEAD + n + 4, place[1])
    if rc:
        return rc
    for sid in range(1, d.used_segs + 1):   # every item head holds one distinct tag
        s = d.segs + sid * MT_SEG_BYTES
        if s[ITEM_KIND] == KIND_HEAD:
            tags[nt] = s + HEAD_TAG
            nt += 1
    bloom_add_tags(bits, k, tags, nt)
    bloom_write_block(bits, d.table_id, min_lsn, max_lsn, block)
    return pwrite_all(<int>place[2], block, BLOOM_BLOCK_SIZE, place[3])


def write_tables(list memtables, const int64_t[:, ::1] places, Py_ssize_t expected_elements,
                 const int64_t[::1] fsync_fds, new_in_dir=None) -> list:
    """Write each memtable's slot and bloom block at places[i] = (table fd, slot offset, bloom fd,
    bloom offset), fsync every fd of fsync_fds, then the directory new_in_dir (a path; None: no file
    was created); returns the blooms (Bloom4K, one per memtable). Raises OSError."""
    cdef Py_ssize_t n = len(memtables), i = 0, most = 0
    if places.shape[0] != n or places.shape[1] != 4:
        raise ValueError(f"write_tables: {n} memtables need places of shape ({n}, 4), got "
                         f"({places.shape[0]}, {places.shape[1]})")
    cdef bytes dir_b = os.fsencode(new_in_dir) if new_in_dir is not None else None
    cdef const char* dir_c = NULL
    if dir_b is not None:
        dir_c = dir_b
    blooms = []
    cdef Memtable m
    cdef Bloom4K b
    cdef MemtableData** ds = <MemtableData**>malloc(max(1, n) * sizeof(MemtableData*))
    cdef uint8_t** bits = <uint8_t**>malloc(max(1, n) * sizeof(uint8_t*))
    cdef uint8_t* buf = NULL
    cdef uint8_t* block = NULL
    cdef int k = 0, rc = 0
    cdef str what = "write"
    if ds == NULL or bits == NULL:
        free(ds)
        free(bits)
        raise MemoryError()
    try:
        for i in range(n):
            m = memtables[i]
            b = Bloom4K(m.d.table_id, m.d.min_lsn, m.d.max_lsn, expected_elements)
            blooms.append(b)
            ds[i] = m.d
            bits[i] = b._bits
            k = b._k
            most = max(most, image_size(m.d))
        buf = <uint8_t*>malloc(SLOT_HEAD + most + 4)
        block = <uint8_t*>malloc(BLOOM_BLOCK_SIZE)
        if buf == NULL or block == NULL:
            raise MemoryError()
        with nogil:
            for i in range(n):
                rc = _write_one(ds[i], bits[i], k, ds[i].min_lsn, ds[i].max_lsn, &places[i, 0], buf, block)
                if rc:
                    break
            if rc == 0:
                for i in range(fsync_fds.shape[0]):
                    if fsync(<int>fsync_fds[i]) != 0:
                        rc = errno
                        break
                if rc == 0 and dir_c != NULL:
                    rc = fsync_dir_path(dir_c)
        if rc:
            raise OSError(rc, f"LogIndex flush of tables {ds[0].table_id}..{ds[n - 1].table_id}: "
                              f"{os.strerror(rc)}")
        return blooms
    finally:
        free(ds)
        free(bits)
        free(buf)
        free(block)
