# File writes for code that runs without the GIL. Each returns 0, or the errno of the call that failed.
from libc.stdint cimport int64_t, uint8_t

# write all n bytes at offset off (retrying short writes and EINTR)
cdef int pwrite_all(int fd, const uint8_t* p, size_t n, int64_t off) noexcept nogil
# fsync a directory, so a file created, renamed or removed in it survives a crash
cdef int fsync_dir_path(const char* path) noexcept nogil
# replace path by data durably: write tmp, fsync it, rename it over path, fsync dirpath
cdef int replace_file(const char* tmp, const char* path, const char* dirpath, const uint8_t* data,
                      size_t n) noexcept nogil
