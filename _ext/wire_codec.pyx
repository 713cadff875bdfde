# cython: language_level=3
"""The framed carrier's frames in C: a connection's reader (split, CRC check, decode) and the
encoders of every frame kind. The format is _ext/wire_format.pxd (and docs/rpc.md).

    r = FrameReader(max_frame, preface=True) # preface: the peer's magic and limit come first
    r.peer_limit                             # the limit the peer's preface announced (0 before it)
    r.feed(data) -> [frame, ...]             # each whole frame received so far, decoded:
        (K_METHODS, first, [path, ...])      (K_REPLIES, reply frames, [status])
        (K_CALLS, [(method, [ids], [requests]), ...] per method as frame_codec.split_calls, body bytes)
        (K_OPEN, stream, method)             (K_MSG, stream, message)   (K_END, stream, code, type, details)
        (K_CANCEL, stream)                   (K_CREDIT, stream, n)      (K_PING | K_PONG, token)
        (K_GOAWAY, code, type, details)      status = (id, code, type, details)
    r.finish() -> raises MalformedFrame when a frame was left half received

feed() raises the typed error (logtide.errors: BadWireMagic, FrameTooLarge, FrameChecksumError,
MalformedFrame) at the first bad byte; a frame's length is checked before its body is buffered.
After an error the reader is spent (the connection is closed).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove
cimport cython

from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.frame_codec cimport split_call_frames
from logtide._ext.wire_format cimport *

from logtide.errors import BadWireMagic, FrameChecksumError, FrameTooLarge, MalformedFrame

KINDS = {"METHODS": K_METHODS, "CALLS": K_CALLS, "REPLIES": K_REPLIES, "OPEN": K_OPEN, "MSG": K_MSG,
         "END": K_END, "CANCEL": K_CANCEL, "CREDIT": K_CREDIT, "PING": K_PING, "PONG": K_PONG,
         "GOAWAY": K_GOAWAY}
HEADER_SIZE = FRAME_HEADER
MAGIC_SIZE = WIRE_MAGIC_SIZE
METHOD_LIMIT = MAX_METHODS
KEEP_BYTES = 1 << 20     # a reader's buffer larger than this is freed once it is empty


def magic() -> bytes:
    """The 8 magic bytes: b"LTWIRE" and the u16 version."""
    cdef uint8_t m[8]
    put64(m, wire_magic())
    return PyBytes_FromStringAndSize(<char*>m, 8)


def preface(uint32_t limit) -> bytes:
    """What each side sends first: the magic and the most body bytes it accepts in one frame."""
    cdef uint8_t m[WIRE_PREFACE_SIZE]
    put64(m, wire_magic())
    put32(m + 8, limit)
    return PyBytes_FromStringAndSize(<char*>m, WIRE_PREFACE_SIZE)


cdef inline str _text(const uint8_t* p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>p, n, "replace")


cdef tuple _status(const uint8_t* b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* after, str what):
    """(code, type, details) of the status at pos; after[0] = the position past it."""
    cdef uint16_t code, tn
    cdef uint32_t dn
    if end - pos < STATUS_HEADER:
        raise MalformedFrame(f"{what}: a status needs {STATUS_HEADER} bytes, {end - pos} left")
    code = get16(b + pos)
    tn = get16(b + pos + 2)
    dn = get32(b + pos + 4)
    if <uint64_t>tn + dn > <uint64_t>(end - pos - STATUS_HEADER):
        raise MalformedFrame(f"{what}: a status's type and details run past the frame")
    pos += STATUS_HEADER
    after[0] = pos + tn + dn
    return code, _text(b + pos, tn), _text(b + pos + tn, dn)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _check_calls(const uint8_t* b, Py_ssize_t pos, Py_ssize_t end) except -1:
    """The number of call frames in b[pos:end]; MalformedFrame unless they split exactly."""
    cdef Py_ssize_t k = 0
    cdef uint32_t n
    while pos < end:
        if end - pos < CALL_HEADER:
            raise MalformedFrame(f"CALLS: a call header needs {CALL_HEADER} bytes, {end - pos} left")
        n = get32(b + pos + 10)
        if n > end - pos - CALL_HEADER:
            raise MalformedFrame(f"CALLS: call {get64(b + pos)}'s request runs past the frame")
        pos += CALL_HEADER + n
        k += 1
    return k


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _check_replies(const uint8_t* b, Py_ssize_t pos, Py_ssize_t end) except -1:
    cdef uint32_t n
    while pos < end:
        if end - pos < REPLY_HEADER:
            raise MalformedFrame(f"REPLIES: a reply header needs {REPLY_HEADER} bytes, {end - pos} left")
        n = get32(b + pos + 8)
        if n > end - pos - REPLY_HEADER:
            raise MalformedFrame(f"REPLIES: reply {get64(b + pos)} runs past its frames")
        pos += REPLY_HEADER + n
    return 0


cdef object _stream_of(const uint8_t* b, Py_ssize_t end, Py_ssize_t need, str what):
    if end < STREAM_HEADER + need:
        raise MalformedFrame(f"{what}: {end} bytes after the kind, needs {STREAM_HEADER + need}")
    return get64(b)


cdef tuple _decode(const uint8_t* body, Py_ssize_t length):
    """One frame's body (kind byte first), decoded (see the module doc)."""
    cdef uint8_t kind = body[0]
    cdef const uint8_t* b = body + 1
    cdef Py_ssize_t end = length - 1, pos, after
    cdef uint32_t flen
    cdef uint16_t first, count, n
    cdef list paths, statuses
    if kind == K_CALLS:
        if _check_calls(b, 0, end) == 0:
            raise MalformedFrame("CALLS: no call in the frame")
        return (K_CALLS, split_call_frames(b, end), end)
    if kind == K_MSG:
        sid = _stream_of(b, end, 0, "MSG")
        return (K_MSG, sid, PyBytes_FromStringAndSize(<const char*>b + STREAM_HEADER, end - STREAM_HEADER))
    if kind == K_REPLIES:
        if end < 4:
            raise MalformedFrame("REPLIES: no frames length")
        flen = get32(b)
        if flen > end - 4:
            raise MalformedFrame(f"REPLIES: frames length {flen} runs past the frame")
        _check_replies(b, 4, 4 + flen)
        statuses = []
        pos = 4 + flen
        while pos < end:
            if end - pos < CALL_STATUS_HEADER:
                raise MalformedFrame(f"REPLIES: a call status needs {CALL_STATUS_HEADER} bytes, {end - pos} left")
            cid = get64(b + pos)
            st = _status(b, pos + 8, end, &after, "REPLIES")
            statuses.append((cid,) + st)
            pos = after
        return (K_REPLIES, PyBytes_FromStringAndSize(<const char*>b + 4, flen), statuses)
    if kind == K_METHODS:
        if end < 4:
            raise MalformedFrame("METHODS: no index and count")
        first = get16(b)
        count = get16(b + 2)
        paths = []
        pos = 4
        for _ in range(count):
            if end - pos < 2:
                raise MalformedFrame("METHODS: a path's length is cut short")
            n = get16(b + pos)
            if n > end - pos - 2:
                raise MalformedFrame("METHODS: a path runs past the frame")
            paths.append(_text(b + pos + 2, n))
            pos += 2 + n
        if pos != end:
            raise MalformedFrame(f"METHODS: {end - pos} bytes after the last path")
        if <uint32_t>first + count > MAX_METHODS:
            raise MalformedFrame(f"METHODS: indexes {first}+{count} pass {MAX_METHODS}")
        return (K_METHODS, first, paths)
    if kind == K_OPEN:
        sid = _stream_of(b, end, 2, "OPEN")
        if end != STREAM_HEADER + 2:
            raise MalformedFrame("OPEN: wrong length")
        return (K_OPEN, sid, get16(b + STREAM_HEADER))
    if kind == K_END:
        sid = _stream_of(b, end, STATUS_HEADER, "END")
        st = _status(b, STREAM_HEADER, end, &after, "END")
        if after != end:
            raise MalformedFrame("END: bytes after the status")
        return (K_END, sid) + st
    if kind == K_CANCEL:
        sid = _stream_of(b, end, 0, "CANCEL")
        if end != STREAM_HEADER:
            raise MalformedFrame("CANCEL: wrong length")
        return (K_CANCEL, sid)
    if kind == K_CREDIT:
        sid = _stream_of(b, end, 4, "CREDIT")
        if end != STREAM_HEADER + 4:
            raise MalformedFrame("CREDIT: wrong length")
        return (K_CREDIT, sid, get32(b + STREAM_HEADER))
    if kind == K_PING or kind == K_PONG:
        if end != 8:
            raise MalformedFrame("PING/PONG: wrong length")
        return (kind, get64(b))
    if kind == K_GOAWAY:
        st = _status(b, 0, end, &after, "GOAWAY")
        if after != end:
            raise MalformedFrame("GOAWAY: bytes after the status")
        return (K_GOAWAY,) + st
    raise MalformedFrame(f"unknown frame kind {kind}")


cdef class FrameReader:
    """Splits a connection's received bytes into verified, decoded frames (see the module doc;
    its fields are declared in wire_codec.pxd)."""

    def __cinit__(self, Py_ssize_t max_frame, bint preface=True):
        if max_frame < 1 or max_frame > 0xFFFFFFFF:
            raise ValueError("max_frame must be in [1, 2**32)")
        self.max_frame = max_frame
        self.want_magic = preface

    @property
    def capacity(self) -> int:
        """Bytes allocated for a frame still coming (at most max_frame + the header)."""
        return self.buf_cap

    def __dealloc__(self):
        free(self.buf)

    @property
    def pending(self) -> int:
        """Bytes of a frame (or of the magic) received and not yet whole."""
        return self.buf_len

    cdef int _keep(self, const uint8_t* p, Py_ssize_t n) except -1:
        """Append p[:n] to the buffer (the start of a frame whose length is already checked)."""
        cdef Py_ssize_t need = self.buf_len + n, cap
        cdef void* q
        if need > self.buf_cap:
            cap = max(need, min(max(self.buf_cap * 2, 4096), self.max_frame + FRAME_HEADER))
            q = realloc(self.buf, cap)
            if q == NULL:
                raise MemoryError("wire: no memory for a frame")
            self.buf, self.buf_cap = <uint8_t*>q, cap
        memcpy(self.buf + self.buf_len, p, n)
        self.buf_len = need
        return 0

    cdef Py_ssize_t _frames(self, const uint8_t* p, Py_ssize_t end, list out) except -1:
        """Decode the whole frames at the start of p[:end] into out; returns the bytes used.
        A header announcing a frame over the limit raises at once."""
        cdef Py_ssize_t pos = 0
        cdef uint32_t length, crc
        while end - pos >= FRAME_HEADER:
            length = get32(p + pos)
            if length == 0 or length > self.max_frame:
                raise FrameTooLarge(f"frame of {length} bytes: the limit is 1..{self.max_frame}")
            if end - pos - FRAME_HEADER < length:
                break
            crc = crc32c_update(0, p + pos + FRAME_HEADER, length)
            if crc != get32(p + pos + 4):
                raise FrameChecksumError(f"frame {self.frames + 1} ({length} bytes, kind {p[pos + FRAME_HEADER]}): "
                                         f"CRC-32C {crc:#010x}, the header says {get32(p + pos + 4):#010x}")
            out.append(_decode(p + pos + FRAME_HEADER, length))
            self.frames += 1
            pos += FRAME_HEADER + length
        if end - pos >= 4:          # the length of a frame still coming: refuse it before buffering it
            length = get32(p + pos)
            if length == 0 or length > self.max_frame:
                raise FrameTooLarge(f"frame of {length} bytes: the limit is 1..{self.max_frame}")
        return pos

    def feed(self, data) -> list:
        """The frames that `data` (the next bytes received) completes, decoded, in order."""
        return self.decode_read(data)

    cdef list decode_read(self, data):
        cdef const uint8_t* p
        cdef Py_ssize_t n, used, take, flen
        cdef list out = []
        cdef const unsigned char[::1] view
        if self.spent:
            raise MalformedFrame("wire: the reader already failed")
        if type(data) is bytes:
            p = <const uint8_t*>PyBytes_AS_STRING(data)
            n = PyBytes_GET_SIZE(data)
        else:
            view = data
            n = view.shape[0]
            p = &view[0] if n else NULL
        if n == 0:
            return out
        self.bytes_in += n
        try:
            if self.want_magic:
                take = min(n, WIRE_PREFACE_SIZE - self.buf_len)
                self._keep(p, take)
                p += take
                n -= take
                if not self._magic_prefix_ok():
                    raise BadWireMagic(f"wire: the connection opened with {self._buf_bytes()!r}, "
                                       f"not the magic {magic()!r}")
                if self.buf_len < WIRE_PREFACE_SIZE:
                    return out
                self.peer_limit = get32(self.buf + WIRE_MAGIC_SIZE)
                if self.peer_limit == 0:
                    raise BadWireMagic("wire: the peer's preface announces a frame limit of 0")
                self.want_magic = False
                self.buf_len = 0
            while n > 0:
                if self.buf_len == 0:
                    used = self._frames(p, n, out)      # straight from the received bytes
                    p += used
                    n -= used
                    if n:
                        self._keep(p, n)
                    break
                # complete the buffered frame: first its header, then exactly its body
                if self.buf_len < FRAME_HEADER:
                    take = min(n, FRAME_HEADER - self.buf_len)
                    self._keep(p, take)
                    p += take
                    n -= take
                    if self.buf_len >= 4:
                        flen = get32(self.buf)
                        if flen == 0 or flen > self.max_frame:
                            raise FrameTooLarge(f"frame of {flen} bytes: the limit is 1..{self.max_frame}")
                    if self.buf_len < FRAME_HEADER:
                        break
                flen = FRAME_HEADER + get32(self.buf)
                take = min(n, flen - self.buf_len)
                self._keep(p, take)
                p += take
                n -= take
                if self.buf_len == flen:
                    self._frames(self.buf, flen, out)
                    self.buf_len = 0
                    if self.buf_cap > KEEP_BYTES:
                        free(self.buf)
                        self.buf, self.buf_cap = NULL, 0
        except BaseException:
            self.spent = True
            raise
        return out

    cdef bint _magic_prefix_ok(self):
        cdef uint8_t m[8]
        put64(m, wire_magic())
        cdef Py_ssize_t i
        for i in range(min(self.buf_len, WIRE_MAGIC_SIZE)):
            if self.buf[i] != m[i]:
                return False
        return True

    cdef bytes _buf_bytes(self):
        return PyBytes_FromStringAndSize(<char*>self.buf, self.buf_len)

    def finish(self) -> None:
        """At the connection's end: MalformedFrame when a frame (or the magic) was left half received."""
        if self.buf_len:
            n = self.buf_len
            self.buf_len = 0
            self.spent = True
            raise MalformedFrame(f"wire: the connection ended {n} bytes into a frame")


# --- encoders ------------------------------------------------------------------------------------

cdef bytes _alloc(Py_ssize_t body, uint8_t kind, uint8_t** o):
    """A frame of `body` bytes after the kind byte: the bytes object and, in o[0], where the body
    goes. The caller fills the body, then _seal() writes the length and CRC."""
    if body + 1 > 0xFFFFFFFF:
        raise OverflowError(f"wire: a frame of {body + 1} bytes")
    out = PyBytes_FromStringAndSize(NULL, FRAME_HEADER + 1 + body)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    p[FRAME_HEADER] = kind
    o[0] = p + FRAME_HEADER + 1
    return out


cdef inline void _seal(bytes frame) noexcept:
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(frame)
    cdef size_t n = <size_t>PyBytes_GET_SIZE(frame) - FRAME_HEADER - 1
    with nogil:
        wire_seal(p, p + FRAME_HEADER + 1, n)


def encode_frame(int kind, bytes body) -> bytes:
    """A frame of `kind` whose fields are `body` (already laid out)."""
    cdef uint8_t* o
    if kind < 1 or kind > K_LAST:
        raise ValueError(f"wire: no frame kind {kind}")
    out = _alloc(PyBytes_GET_SIZE(body), <uint8_t>kind, &o)
    memcpy(o, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
    _seal(out)
    return out


def encode_calls(bytes frames) -> bytes:
    """The CALLS frame of packed call frames (as CallSlots.poll() hands them over)."""
    return encode_frame(K_CALLS, frames)


def encode_methods(unsigned int first, list paths) -> bytes:
    """The METHODS frame binding paths[k] to index first + k."""
    cdef Py_ssize_t total = 4, pos = 4
    cdef uint8_t* o
    enc = [p.encode() for p in paths]
    if first + len(enc) > MAX_METHODS:
        raise ValueError(f"wire: more than {MAX_METHODS} methods on one connection")
    for e in enc:
        if len(e) > 0xFFFF:
            raise ValueError("wire: a method path over 65535 bytes")
        total += 2 + len(e)
    out = _alloc(total, K_METHODS, &o)
    put16(o, <uint16_t>first)
    put16(o + 2, <uint16_t>len(enc))
    for e in enc:
        put16(o + pos, <uint16_t>len(e))
        memcpy(o + pos + 2, PyBytes_AS_STRING(e), len(e))
        pos += 2 + len(e)
    _seal(out)
    return out


cdef Py_ssize_t _put_status(uint8_t* o, int code, bytes t, bytes d) except -1:
    if code < 0 or code > 0xFFFF or len(t) > 0xFFFF or len(d) > 0xFFFFFFFF:
        raise ValueError("wire: a status out of range")
    put16(o, <uint16_t>code)
    put16(o + 2, <uint16_t>len(t))
    put32(o + 4, <uint32_t>len(d))
    memcpy(o + STATUS_HEADER, PyBytes_AS_STRING(t), len(t))
    memcpy(o + STATUS_HEADER + len(t), PyBytes_AS_STRING(d), len(d))
    return STATUS_HEADER + len(t) + len(d)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bytes replies_frame(list parts, Py_ssize_t flen):
    """The REPLIES frame of packed reply frames `parts` (bytes objects of flen bytes in all, flen
    under 4 GiB) and no failed calls."""
    cdef uint8_t* o
    cdef Py_ssize_t k, n, pos = 4
    out = _alloc(4 + flen, K_REPLIES, &o)
    put32(o, <uint32_t>flen)
    for k in range(PyList_GET_SIZE(parts)):
        p = <bytes>PyList_GET_ITEM(parts, k)
        n = PyBytes_GET_SIZE(p)
        memcpy(o + pos, PyBytes_AS_STRING(p), n)
        pos += n
    _seal(out)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def encode_replies(list parts, list statuses) -> bytes:
    """The REPLIES frame of a batch: `parts` are packed reply frames (bytes, joined in order),
    `statuses` the failed calls as (id, code, type, details)."""
    cdef Py_ssize_t flen = 0, total, pos
    cdef uint8_t* o
    enc = []
    for p in parts:
        flen += PyBytes_GET_SIZE(<bytes?>p)
    if flen > 0xFFFFFFFF:
        raise OverflowError("wire: replies over 4 GiB")
    total = 4 + flen
    for cid, code, t, d in statuses:
        e = (cid, code, t.encode(), d.encode())
        enc.append(e)
        total += 8 + STATUS_HEADER + len(e[2]) + len(e[3])
    out = _alloc(total, K_REPLIES, &o)
    put32(o, <uint32_t>flen)
    pos = 4
    for p in parts:
        memcpy(o + pos, PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p))
        pos += PyBytes_GET_SIZE(p)
    for cid, code, t, d in enc:
        put64(o + pos, <uint64_t>cid)
        pos += 8 + _put_status(o + pos + 8, code, t, d)
    _seal(out)
    return out


def encode_open(uint64_t stream, unsigned int method) -> bytes:
    cdef uint8_t* o
    if method >= MAX_METHODS:
        raise ValueError("wire: method index over 65535")
    out = _alloc(STREAM_HEADER + 2, K_OPEN, &o)
    put64(o, stream)
    put16(o + STREAM_HEADER, <uint16_t>method)
    _seal(out)
    return out


def encode_msg(uint64_t stream, bytes message) -> bytes:
    cdef uint8_t* o
    out = _alloc(STREAM_HEADER + PyBytes_GET_SIZE(message), K_MSG, &o)
    put64(o, stream)
    memcpy(o + STREAM_HEADER, PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message))
    _seal(out)
    return out


def encode_end(uint64_t stream, int code=0, str error_type="", str details="") -> bytes:
    """END of a stream: code 0 a normal end, else the error's status."""
    cdef uint8_t* o
    t, d = error_type.encode(), details.encode()
    out = _alloc(STREAM_HEADER + STATUS_HEADER + len(t) + len(d), K_END, &o)
    put64(o, stream)
    _put_status(o + STREAM_HEADER, code, t, d)
    _seal(out)
    return out


def encode_cancel(uint64_t stream) -> bytes:
    cdef uint8_t* o
    out = _alloc(STREAM_HEADER, K_CANCEL, &o)
    put64(o, stream)
    _seal(out)
    return out


def encode_credit(uint64_t stream, uint32_t n) -> bytes:
    cdef uint8_t* o
    out = _alloc(STREAM_HEADER + 4, K_CREDIT, &o)
    put64(o, stream)
    put32(o + STREAM_HEADER, n)
    _seal(out)
    return out


def encode_ping(uint64_t token, bint pong=False) -> bytes:
    cdef uint8_t* o
    out = _alloc(8, K_PONG if pong else K_PING, &o)
    put64(o, token)
    _seal(out)
    return out


def encode_goaway(int code, str error_type, str details) -> bytes:
    """GOAWAY: why the sender closes the connection."""
    cdef uint8_t* o
    t, d = error_type.encode(), details.encode()
    out = _alloc(STATUS_HEADER + len(t) + len(d), K_GOAWAY, &o)
    _put_status(o, code, t, d)
    _seal(out)
    return out
