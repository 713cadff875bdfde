# The framed carrier's reader (wire_codec.pyx), declared for the server's connection core
# (wire_conn.pyx), which takes a read's frames and the reader's state without Python calls.
from libc.stdint cimport uint8_t, uint32_t, uint64_t


cdef class FrameReader:
    cdef uint8_t* buf
    cdef Py_ssize_t buf_len, buf_cap
    cdef readonly Py_ssize_t max_frame
    cdef bint want_magic
    cdef bint spent
    cdef readonly uint64_t frames, bytes_in
    cdef readonly uint32_t peer_limit

    cdef int _keep(self, const uint8_t* p, Py_ssize_t n) except -1
    cdef Py_ssize_t _frames(self, const uint8_t* p, Py_ssize_t end, list out) except -1
    cdef list decode_read(self, data)   # what feed() returns
    cdef bint _magic_prefix_ok(self)
    cdef bytes _buf_bytes(self)


# The REPLIES frame of packed reply frames (bytes objects, flen bytes in all) and no failed calls.
cdef bytes replies_frame(list parts, Py_ssize_t flen)
