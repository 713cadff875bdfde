# The writes of one connection's socket from more than one thread, in order: the event loop, which
# owns the connection's transport, and callers that send their own batch without waking the loop
# (call_slots.pyx). Every write holds the writer's mutex. A caller writes to the socket itself only
# while the loop's transport holds no unsent bytes ("loop_owns" clear); a send that would block
# leaves its unsent rest for the loop and sets loop_owns, so the loop's transport then writes
# everything, in order, until it is empty again and the loop releases the writer.
#
# The writer sends on a dup of the socket, closed only under the mutex: a caller never writes to a
# file number that the loop closed and the process reused.
from libc.stdint cimport uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from logtide._ext.futex cimport lt_lock, lt_mutex, lt_mutex_destroy, lt_mutex_init, lt_unlock

cdef extern from *:
    """
    #include <errno.h>
    #include <fcntl.h>
    #include <sys/socket.h>
    #include <sys/uio.h>
    #include <unistd.h>

    /* Send a then b, without blocking: how many bytes went (>= 0), or -1 when the socket failed. */
    static inline ssize_t sw_sendv(int fd, const void* a, size_t alen, const void* b, size_t blen) {
        size_t sent = 0, total = alen + blen;
        while (sent < total) {
            struct iovec iov[2];
            int n = 0;
            if (sent < alen) {
                iov[n].iov_base = (char*)a + sent; iov[n].iov_len = alen - sent; n++;
                iov[n].iov_base = (void*)b; iov[n].iov_len = blen; n++;
            } else {
                iov[n].iov_base = (char*)b + (sent - alen); iov[n].iov_len = total - sent; n++;
            }
            struct msghdr m = {0};
            m.msg_iov = iov; m.msg_iovlen = n;
            ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                return -1;
            }
            sent += (size_t)r;
        }
        return (ssize_t)sent;
    }
    static inline int sw_dup(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }
    /* break the connection for both sides: its reader sees the end and fails every call */
    static inline void sw_break(int fd) { shutdown(fd, SHUT_RDWR); }
    """
    ssize_t sw_sendv(int fd, const void* a, size_t alen, const void* b, size_t blen) nogil
    int sw_dup(int fd) nogil
    void sw_break(int fd) nogil
    int close(int fd) nogil


cdef enum:
    SW_SENT = 0       # every byte is on the socket
    SW_LOOP = 1       # the loop must write (it owns the writes, or took the rest of this send)
    SW_FAILED = 2     # the socket failed (or no memory for the rest: broken on purpose); the loop's
                      # read side sees the break and fails every call


cdef struct SocketWriter:
    lt_mutex mu
    int fd                # the dup the writer sends on (-1: detached, every write is the loop's)
    bint loop_owns        # the loop's transport may hold unsent bytes
    uint8_t* rest         # what a send that would have blocked left unsent, for the loop
    size_t rest_len, rest_cap


cdef inline void sw_init(SocketWriter* w) noexcept nogil:
    lt_mutex_init(&w.mu)
    w.fd = -1
    w.loop_owns = True
    w.rest = NULL
    w.rest_len = w.rest_cap = 0


cdef inline void sw_destroy(SocketWriter* w) noexcept nogil:
    if w.fd >= 0:
        close(w.fd)
        w.fd = -1
    free(w.rest)
    w.rest = NULL
    lt_mutex_destroy(&w.mu)


cdef inline int sw_attach(SocketWriter* w, int fd) noexcept nogil:
    """Send on a dup of fd from now on (the loop owns the writes until it releases them); -1 when
    dup failed."""
    cdef int d = sw_dup(fd)
    if d < 0:
        return -1
    lt_lock(&w.mu)
    if w.fd >= 0:
        close(w.fd)
    w.fd = d
    w.loop_owns = True
    lt_unlock(&w.mu)
    return 0


cdef inline void sw_detach(SocketWriter* w) noexcept nogil:
    """Stop sending: every later write is the loop's."""
    lt_lock(&w.mu)
    if w.fd >= 0:
        close(w.fd)
        w.fd = -1
    w.loop_owns = True
    lt_unlock(&w.mu)


cdef inline bint sw_can_send_locked(SocketWriter* w) noexcept nogil:
    return w.fd >= 0 and not w.loop_owns


cdef inline int sw_keep_rest_locked(SocketWriter* w, const uint8_t* a, size_t alen,
                                    const uint8_t* b, size_t blen, size_t sent) noexcept nogil:
    """Under the mutex: keep the bytes of a+b from `sent` on for the loop, which owns the writes now."""
    cdef size_t n = alen + blen - sent
    cdef void* p
    w.loop_owns = True
    if w.rest_len + n > w.rest_cap:
        p = realloc(w.rest, w.rest_len + n)
        if p == NULL:
            sw_break(w.fd)    # half a frame went out: the stream cannot go on
            return SW_FAILED
        w.rest, w.rest_cap = <uint8_t*>p, w.rest_len + n
    if sent < alen:
        memcpy(w.rest + w.rest_len, a + sent, alen - sent)
        w.rest_len += alen - sent
        sent = alen
    memcpy(w.rest + w.rest_len, b + (sent - alen), alen + blen - sent)
    w.rest_len += alen + blen - sent
    return SW_LOOP


cdef inline int sw_send_locked(SocketWriter* w, const uint8_t* a, size_t alen,
                               const uint8_t* b, size_t blen) noexcept nogil:
    """Under the mutex, with sw_can_send_locked: send a then b (SW_SENT, SW_LOOP or SW_FAILED)."""
    cdef ssize_t r = sw_sendv(w.fd, a, alen, b, blen)
    if r < 0:
        w.loop_owns = True
        return SW_FAILED
    if <size_t>r == alen + blen:
        return SW_SENT
    return sw_keep_rest_locked(w, a, alen, b, blen, <size_t>r)
