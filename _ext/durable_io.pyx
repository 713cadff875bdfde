# cython: language_level=3
"""Durable file writes in C, for paths that must not take the GIL once per system call.

A thread that makes many short system calls while another thread runs Python waits for the GIL
after each of them, up to the interpreter's switch interval (5 ms): a LogIndex flush of a few
fsyncs and a rename, beside a loop of inserts, took 40-56 ms that way for 1-7 tables. These
helpers run a whole sequence without the GIL.

    replace_file_durably(tmp, path, data)   # write tmp, fsync, rename over path, fsync its directory
"""
import os

from libc.errno cimport errno, EINTR, EIO
from libc.stdint cimport int64_t, uint8_t


cdef extern from "<fcntl.h>" nogil:
    int open(const char* path, int flags, int mode)
    int O_WRONLY, O_CREAT, O_TRUNC, O_RDONLY, O_DIRECTORY, O_CLOEXEC

cdef extern from "<unistd.h>" nogil:
    ssize_t pwrite(int fd, const void* buf, size_t count, int64_t offset)
    int fsync(int fd)
    int close(int fd)

cdef extern from "<stdio.h>" nogil:
    int rename(const char* old, const char* new)


cdef int pwrite_all(int fd, const uint8_t* p, size_t n, int64_t off) noexcept nogil:
    cdef ssize_t w
    while n:
        w = pwrite(fd, p, n, off)
        if w < 0:
            if errno == EINTR:
                continue
            return errno
        if w == 0:
            return EIO
        p += w
        n -= w
        off += w
    return 0


cdef int _fsync_close(int fd) noexcept nogil:
    cdef int rc = 0
    if fsync(fd) != 0:
        rc = errno
    if close(fd) != 0 and rc == 0:
        rc = errno
    return rc


cdef int fsync_dir_path(const char* path) noexcept nogil:
    cdef int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
    if fd < 0:
        return errno
    return _fsync_close(fd)


cdef int replace_file(const char* tmp, const char* path, const char* dirpath, const uint8_t* data,
                      size_t n) noexcept nogil:
    cdef int rc, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    if fd < 0:
        return errno
    rc = pwrite_all(fd, data, n, 0)
    if rc:
        close(fd)
        return rc
    rc = _fsync_close(fd)
    if rc:
        return rc
    if rename(tmp, path) != 0:
        return errno
    return fsync_dir_path(dirpath)


def replace_file_durably(tmp, path, data) -> None:
    """Replace `path` by `data` so that a crash leaves the old file or the new one: write `tmp`,
    fsync it, rename it over `path`, fsync the directory. Raises OSError (naming the file)."""
    cdef bytes t = os.fsencode(tmp), p = os.fsencode(path)
    cdef bytes d = os.fsencode(os.path.dirname(os.path.abspath(path)))
    cdef const uint8_t[::1] v = memoryview(data).cast("B")
    cdef const char* tc = t
    cdef const char* pc = p
    cdef const char* dc = d
    cdef const uint8_t* dp = &v[0] if v.shape[0] else NULL
    cdef size_t n = v.shape[0]
    cdef int rc
    with nogil:
        rc = replace_file(tc, pc, dc, dp, n)
    if rc:
        raise OSError(rc, os.strerror(rc), os.fsdecode(path))
