# cython: language_level=3
"""The serialized protobuf form of Raft messages (engine/raft/raft.proto), written straight from
their fields: what `pb.RaftBatch(...).SerializeToString()` gives, without building a protobuf
object per entry and per message.

A leader sends every new entry to each follower; `entry_field` is an entry's bytes as a
RaftMessage's `entries` field (CRC included), made once and reused for every follower's message.
Protobuf concatenation appends repeated fields, so a message is its header and then its entry
fields; a batch wraps each message's bytes with its field tag and length. Fields at their proto3
default are left out, as protobuf leaves them out.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from logtide._ext.varint cimport put_uint_field, put_varint, uint_field_len, varint_len
from libc.string cimport memcpy

from logtide._ext.crc32c cimport crc32c_update

# field tags: (number << 3) | wire type (0 varint, 2 length-delimited)
DEF T_ENTRY_TERM = 0x08
DEF T_ENTRY_INDEX = 0x10
DEF T_ENTRY_TYPE = 0x18
DEF T_ENTRY_DATA = 0x22
DEF T_ENTRY_CRC = 0x28
DEF T_MSG_TYPE = 0x08
DEF T_MSG_TO = 0x10
DEF T_MSG_FRM = 0x18
DEF T_MSG_TERM = 0x20
DEF T_MSG_LOG_TERM = 0x28
DEF T_MSG_INDEX = 0x30
DEF T_MSG_ENTRIES = 0x3a
DEF T_MSG_COMMIT = 0x40
DEF T_MSG_REJECT = 0x48
DEF T_MSG_REJECT_HINT = 0x50
DEF T_MSG_CONTEXT = 0x62
DEF T_BATCH_CLUSTER = 0x08
DEF T_BATCH_FRM = 0x10
DEF T_BATCH_MESSAGES = 0x1a
DEF T_BATCH_SEQ = 0x20


cdef inline void _put_be64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int k
    for k in range(8):
        p[k] = <uint8_t>(v >> (56 - 8 * k))


def entry_field(uint64_t term, uint64_t index, uint32_t etype, bytes data) -> bytes:
    """One RaftEntry as a RaftMessage `entries` field: tag, length, then term, index, type, data
    and the CRC-32C of (">QQB" term, index, type) + data (as raft_entry_crc.entry_crc)."""
    cdef uint8_t key[17]
    cdef Py_ssize_t dn = PyBytes_GET_SIZE(data)
    cdef const uint8_t* dp = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef uint32_t crc
    cdef Py_ssize_t body, pos
    cdef uint8_t* o
    if etype > 0xff:
        raise OverflowError(f"entry type {etype} does not fit the CRC's key byte")
    _put_be64(key, term)
    _put_be64(key + 8, index)
    key[16] = <uint8_t>etype
    crc = crc32c_update(crc32c_update(0, key, 17), dp, <size_t>dn)
    body = uint_field_len(term) + uint_field_len(index) + uint_field_len(etype) + uint_field_len(crc)
    if dn:
        body += 1 + varint_len(<uint64_t>dn) + dn
    out = PyBytes_FromStringAndSize(NULL, 1 + varint_len(<uint64_t>body) + body)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    o[0] = T_MSG_ENTRIES
    pos = 1 + put_varint(o + 1, 0, <uint64_t>body)
    pos += put_uint_field(o + pos, T_ENTRY_TERM, term)
    pos += put_uint_field(o + pos, T_ENTRY_INDEX, index)
    pos += put_uint_field(o + pos, T_ENTRY_TYPE, etype)
    if dn:
        o[pos] = T_ENTRY_DATA
        pos += 1 + put_varint(o + pos + 1, 0, <uint64_t>dn)
        memcpy(o + pos, dp, dn)
        pos += dn
    pos += put_uint_field(o + pos, T_ENTRY_CRC, crc)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def message_bytes(uint32_t mtype, uint64_t to, uint64_t frm, uint64_t term, uint64_t log_term, uint64_t index,
                  uint64_t commit, bint reject, uint64_t reject_hint, bytes context, list entry_fields) -> bytes:
    """A RaftMessage without a snapshot: its header fields, then `entry_fields` (entry_field's bytes)."""
    cdef Py_ssize_t k, n = PyList_GET_SIZE(entry_fields)
    cdef Py_ssize_t cn = PyBytes_GET_SIZE(context)
    cdef Py_ssize_t total, pos, fn
    cdef uint8_t* o
    total = (uint_field_len(mtype) + uint_field_len(to) + uint_field_len(frm) + uint_field_len(term)
             + uint_field_len(log_term) + uint_field_len(index) + uint_field_len(commit) + (2 if reject else 0)
             + uint_field_len(reject_hint))
    if cn:
        total += 1 + varint_len(<uint64_t>cn) + cn
    for k in range(n):
        f = <object>PyList_GET_ITEM(entry_fields, k)
        if type(f) is not bytes:
            raise TypeError(f"an entry field must be bytes, not {type(f).__name__}")
        total += PyBytes_GET_SIZE(f)
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    pos = put_uint_field(o, T_MSG_TYPE, mtype)
    pos += put_uint_field(o + pos, T_MSG_TO, to)
    pos += put_uint_field(o + pos, T_MSG_FRM, frm)
    pos += put_uint_field(o + pos, T_MSG_TERM, term)
    pos += put_uint_field(o + pos, T_MSG_LOG_TERM, log_term)
    pos += put_uint_field(o + pos, T_MSG_INDEX, index)
    for k in range(n):   # protobuf writes fields in number order: entries (7) before commit (8)
        f = <object>PyList_GET_ITEM(entry_fields, k)
        fn = PyBytes_GET_SIZE(f)
        memcpy(o + pos, PyBytes_AS_STRING(f), fn)
        pos += fn
    pos += put_uint_field(o + pos, T_MSG_COMMIT, commit)
    pos += put_uint_field(o + pos, T_MSG_REJECT, 1 if reject else 0)
    pos += put_uint_field(o + pos, T_MSG_REJECT_HINT, reject_hint)
    if cn:
        o[pos] = T_MSG_CONTEXT
        pos += 1 + put_varint(o + pos + 1, 0, <uint64_t>cn)
        memcpy(o + pos, PyBytes_AS_STRING(context), cn)
        pos += cn
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def batch_bytes(uint64_t cluster, uint64_t frm, list messages, uint64_t seq=0) -> bytes:
    """A RaftBatch of the serialized RaftMessages `messages`."""
    cdef Py_ssize_t k, n = PyList_GET_SIZE(messages)
    cdef Py_ssize_t total, pos, mn
    cdef uint8_t* o
    total = uint_field_len(cluster) + uint_field_len(frm) + uint_field_len(seq)
    for k in range(n):
        m = <object>PyList_GET_ITEM(messages, k)
        if type(m) is not bytes:
            raise TypeError(f"a message must be bytes, not {type(m).__name__}")
        mn = PyBytes_GET_SIZE(m)
        total += 1 + varint_len(<uint64_t>mn) + mn
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    pos = put_uint_field(o, T_BATCH_CLUSTER, cluster)
    pos += put_uint_field(o + pos, T_BATCH_FRM, frm)
    for k in range(n):
        m = <object>PyList_GET_ITEM(messages, k)
        mn = PyBytes_GET_SIZE(m)
        o[pos] = T_BATCH_MESSAGES
        pos += 1 + put_varint(o + pos + 1, 0, <uint64_t>mn)
        memcpy(o + pos, PyBytes_AS_STRING(m), mn)
        pos += mn
    pos += put_uint_field(o + pos, T_BATCH_SEQ, seq)
    return out
