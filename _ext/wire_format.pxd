# The framed TCP carrier's bytes (docs/rpc.md, "The framed carrier"), shared by its encoder and
# decoder (wire_codec.pyx) and by the call frames the client's slots pack (call_slots.pyx) and the
# server splits (frame_codec.pyx). Everything is little-endian.
#
# A connection opens with a preface from each side, the client first: the 8 magic bytes, then
# [u32 limit]: the most body bytes the sender accepts in one frame. Then frames:
#     [u32 length][u32 crc32c of body][body: length bytes]      body = [u8 kind][kind's fields]
# with 1 <= length <= the receiver's frame limit (checked before the body is buffered).
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from logtide._ext.crc32c cimport crc32c_update

cdef enum:
    WIRE_MAGIC_SIZE = 8
    WIRE_PREFACE_SIZE = 12  # magic, u32 limit
    WIRE_VERSION = 1
    FRAME_HEADER = 8        # u32 length, u32 crc32c
    # kinds (the body's first byte)
    K_METHODS = 1           # [u16 first index][u16 count] count x ([u16 n][path: n bytes])
    K_CALLS = 2             # call frames, at least one
    K_REPLIES = 3           # [u32 frames length][reply frames][call statuses to the end]
    K_OPEN = 4              # [u64 stream][u16 method]
    K_MSG = 5               # [u64 stream][message: the rest of the body]
    K_END = 6               # [u64 stream][status]        status code 0: the stream ended normally
    K_CANCEL = 7            # [u64 stream]
    K_CREDIT = 8            # [u64 stream][u32 messages]
    K_PING = 9              # [u64 token]
    K_PONG = 10             # [u64 token]
    K_GOAWAY = 11           # [status]; the sender then closes the connection
    K_LAST = 11
    # inside bodies
    CALL_HEADER = 14        # call frame:  [u64 id][u16 method][u32 n][request: n bytes]
    REPLY_HEADER = 12       # reply frame: [u64 id][u32 n][response: n bytes]
    STATUS_HEADER = 8       # status:      [u16 code][u16 type n][u32 details n][type][details]
    CALL_STATUS_HEADER = 16 # call status: [u64 id][status]
    STREAM_HEADER = 8       # [u64 stream] at the start of OPEN, MSG, END, CANCEL, CREDIT
    MAX_METHODS = 65536     # method indexes are u16


cdef inline uint64_t wire_magic() noexcept nogil:
    """The 8 magic bytes as a little-endian u64: b"LTWIRE" then the u16 version (1)."""
    return 0x000145524957544C


cdef inline void put16(uint8_t* p, uint16_t v) noexcept nogil:
    memcpy(p, &v, 2)        # little-endian, like every platform logtide builds on


cdef inline void put32(uint8_t* p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)


cdef inline void put64(uint8_t* p, uint64_t v) noexcept nogil:
    memcpy(p, &v, 8)


cdef inline uint16_t get16(const uint8_t* p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v


cdef inline uint32_t get32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline uint64_t get64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


cdef inline void wire_seal(uint8_t* head, const uint8_t* rest, size_t rest_n) noexcept nogil:
    """Seal a frame: write its length and CRC-32C into head[0:8]. The body is head's kind byte
    (head[FRAME_HEADER]) followed by rest[0:rest_n], which need not follow it in memory: a caller
    may send the header and a body it keeps elsewhere in one sendmsg."""
    put32(head, <uint32_t>(rest_n + 1))
    put32(head + 4, crc32c_update(crc32c_update(0, head + FRAME_HEADER, 1), rest, rest_n))
