# Protobuf's base-128 varints (7 bits a byte, least significant group first, high bit = more),
# shared by the modules that write or read protobuf fields in C (frame_codec.pyx, raft_wire_bytes.pyx),
# and the varint fields they write.
from libc.stdint cimport uint8_t, uint64_t

cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef inline int varint_len(uint64_t v) noexcept nogil:
    """Bytes of v as a varint (at least one)."""
    return (70 - __builtin_clzll(v | 1)) // 7


cdef inline Py_ssize_t put_varint(uint8_t* o, Py_ssize_t pos, uint64_t v) noexcept nogil:
    """Write v at o[pos]; the position after it."""
    while v >= 0x80:
        o[pos] = <uint8_t>(v & 0x7F) | 0x80
        v >>= 7
        pos += 1
    o[pos] = <uint8_t>v
    return pos + 1


cdef inline Py_ssize_t get_varint(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, uint64_t* out) noexcept nogil:
    """The position after the varint at p[pos], with its value in out; -1 when it is cut short,
    longer than 10 bytes or past 64 bits."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while pos < end:
        b = p[pos]
        pos += 1
        if shift == 63 and b > 1:
            return -1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = v
            return pos
        shift += 7
        if shift > 63:
            return -1
    return -1


cdef inline Py_ssize_t uint_field_len(uint64_t v) noexcept nogil:
    """Bytes of a varint field with a one-byte tag: 0 when v is 0 (proto3 leaves a default out)."""
    return 1 + varint_len(v) if v else 0


cdef inline Py_ssize_t put_uint_field(uint8_t* o, uint8_t tag, uint64_t v) noexcept nogil:
    """Write that field at o (nothing when v is 0); the bytes written."""
    if not v:
        return 0
    o[0] = tag
    return 1 + put_varint(o + 1, 0, v)
