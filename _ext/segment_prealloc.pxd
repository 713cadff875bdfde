# Writing a log segment that a pre-allocation thread extends with zeros ahead of the frames, so
# that the flusher's fdatasync later finds the size and extents already on disk. `zeroed` is the
# file offset up to which the segment is written (frames or zeros). A frame write below it needs no
# lock; one reaching past it, and every zero fill, hold the mutex, so zeros never land on frames.
from libc.stdint cimport uint8_t, uint64_t

from logtide._ext.futex cimport lt_eintr, lt_errno, lt_load64, lt_lock, lt_mutex, lt_store64, lt_unlock

cdef extern from "<unistd.h>" nogil:
    ssize_t c_pwrite "pwrite"(int fd, const void* buf, size_t count, long long offset)
    int fdatasync(int fd)

cdef enum:
    ZERO_CHUNK = 1 << 20  # zeros are written (and synced) in pieces of this size


cdef struct Prealloc:
    lt_mutex mu
    int fd                # the current segment, or -1
    uint64_t zeroed       # its written extent
    uint64_t generation   # bumped per segment: which one a fill was meant for
    uint8_t* zeros        # ZERO_CHUNK zero bytes (allocated by the first fill)


cdef inline int pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off) noexcept nogil:
    """Write n bytes at file offset off; 0, or the errno. A short write (EFBIG or ENOSPC on the
    way) is retried, so the failure is reported with what fitted already written."""
    cdef size_t done = 0
    cdef ssize_t k
    while done < n:
        k = c_pwrite(fd, p + done, n - done, <long long>(off + done))
        if k < 0:
            if lt_eintr():
                continue
            return lt_errno()
        done += k
    return 0


cdef inline int prealloc_write(Prealloc* z, int fd, const uint8_t* data, size_t n, uint64_t base) noexcept nogil:
    """Write frames at file offset base: 0, or the errno."""
    cdef int err
    if base + n <= lt_load64(&z.zeroed):  # inside the pre-allocated zeros
        return pwrite_all(fd, data, n, base)
    lt_lock(&z.mu)  # the file grows: keep a concurrent zero fill off these bytes
    err = pwrite_all(fd, data, n, base)
    if not err and base + n > z.zeroed:
        lt_store64(&z.zeroed, base + n)
    lt_unlock(&z.mu)
    return err


cdef inline void prealloc_set_segment(Prealloc* z, int fd, uint64_t written) noexcept nogil:
    """Frames go to fd from now on; its bytes up to `written` are frames or zeros."""
    lt_lock(&z.mu)
    z.fd = fd
    z.generation += 1
    lt_store64(&z.zeroed, written)
    lt_unlock(&z.mu)


cdef inline int prealloc_fill(Prealloc* z, uint64_t generation, uint64_t upto, bint sync,
                              uint64_t* added) noexcept nogil:
    """Extend the segment of `generation` (if still current) with zeros up to `upto`, fdatasync'ing
    every piece when sync; `added` gets the bytes added. 0, or the errno (what fitted is kept)."""
    cdef uint64_t start, pos
    cdef size_t piece
    cdef int err = 0
    lt_lock(&z.mu)
    start = pos = z.zeroed
    while z.fd >= 0 and generation == z.generation and pos < upto:
        piece = <size_t>min(<uint64_t>ZERO_CHUNK, upto - pos)
        err = pwrite_all(z.fd, z.zeros, piece, pos)
        if not err and sync and fdatasync(z.fd) != 0:
            err = lt_errno()
        if err:
            break
        pos += piece
        lt_store64(&z.zeroed, pos)
    lt_unlock(&z.mu)
    added[0] = pos - start
    return err
