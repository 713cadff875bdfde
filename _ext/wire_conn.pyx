# cython: language_level=3
"""The framed carrier server's connection read path in C (engine/rpc/wire_server.py's _ServerConn
is a ConnCore).

The transport hands each read straight to ConnCore.data_received: the connection's FrameReader
splits it into verified frames, and a CALLS frame whose calls are all of methods answered on the
loop by a `frames_<Method>` hook (see `hooks`) is answered here, each method's hook called with its
ids and request bytes and their packed replies sealed as one REPLIES frame; no Python frame runs
between the transport and the servicer's hook. Every other frame goes to the connection's general
path (`_calls`, `_frame`), and a hooked batch with failed calls, replies past the client's frame
limit or a servicer's odd answer ends in `_hooks_done`, which is how run_calls ends a batch. The
replies of a read are written after it, in one write, and a bad frame closes the connection with a
GOAWAY (`goaway`), exactly as on the general path.
"""
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

from logtide._ext.futex cimport lt_now
from logtide._ext.wire_codec cimport FrameReader, replies_frame
from logtide._ext.wire_format cimport K_CALLS

from logtide.errors import WireProtocolError

# the REPLIES frame and reply headers beside a reply's bytes
REPLY_ROOM = 64


cdef class ConnCore:
    """A server connection's state that its reads touch; the Python subclass holds the rest and the
    general path: `_sniffed(data)`, `_calls(groups, nbytes)`, `_frame(frame)`, `_hooks_done(parts,
    fails)`, `_batch_failed(exc)` and `goaway(exc)`."""
    cdef public FrameReader reader
    cdef public object tr
    cdef public object ctx
    cdef public list out            # replies made while a read is handled, written after it
    # per bound method index: the frames hook that answers its calls on the loop, else None
    cdef public list hooks
    cdef public bint closed
    cdef public bint sniffing       # the first bytes say which carrier the client speaks
    cdef public double partial_since  # when the reader last held part of a frame (0: none)
    cdef public Py_ssize_t peer_limit

    def data_received(self, data) -> None:
        cdef list frames, out
        cdef tuple f
        cdef FrameReader reader
        cdef object conn = self
        if self.closed:
            return
        if self.sniffing and conn._sniffed(data):
            return
        reader = self.reader
        try:
            frames = reader.decode_read(data)
            if not self.peer_limit:
                self.peer_limit = reader.peer_limit
            for f in frames:
                if f[0] == K_CALLS:
                    if not self._hooked(<list>f[1]):
                        conn._calls(f[1], f[2])
                else:
                    conn._frame(f)
        except WireProtocolError as exc:
            conn.goaway(exc)
            return
        out = self.out
        if PyList_GET_SIZE(out) == 1:         # the list is kept: a transport's write takes the bytes
            if not self.closed:
                self.tr.write(<object>PyList_GET_ITEM(out, 0))
            del out[:]
        elif PyList_GET_SIZE(out):
            self.out = []
            if not self.closed:
                self.tr.writelines(out)
        if reader.buf_len:
            self.partial_since = lt_now()   # time.monotonic()'s clock: the server's sweeper compares with it
        elif self.partial_since:
            self.partial_since = 0.0

    cdef bint _hooked(self, list groups) except -1:
        """Answer a CALLS frame (split per method) whose methods all have hooks on the loop; False
        when it is not such a frame (the general path takes it)."""
        cdef list hooks = self.hooks
        cdef Py_ssize_t nh = PyList_GET_SIZE(hooks), m, flen = 0
        cdef tuple g
        cdef list parts, fails = None
        cdef bint plain = True
        for g in groups:
            m = g[0]
            if m >= nh or <object>PyList_GET_ITEM(hooks, m) is None:
                return False
        parts = []
        try:
            for g in groups:
                ids = g[1]
                try:
                    frames, failed = (<object>PyList_GET_ITEM(hooks, <Py_ssize_t>g[0]))(ids, g[2], self.ctx)
                except Exception as exc:     # the whole group failed alike
                    frames, failed = b"", [(call_id, exc) for call_id in ids]
                if frames:
                    parts.append(frames)
                    flen += len(frames)
                    if type(frames) is not bytes:
                        plain = False
                if type(failed) is not list or PyList_GET_SIZE(failed):
                    if fails is None:
                        fails = []
                    fails.append((g[0], failed))
                    plain = False
            if plain and flen <= self.peer_limit - REPLY_ROOM:
                self.out.append(replies_frame(parts, flen))
                return True
        except Exception as exc:             # a bug of ours: that connection cannot go on
            (<object>self)._batch_failed(exc)
            return True
        (<object>self)._hooks_done(parts, fails)
        return True
