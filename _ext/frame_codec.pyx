# cython: language_level=3
"""The call pipeline's frames on the server, split and packed in one call per batch.

engine/rpc/call_frames.py is the model (and the format's description); these do the same work in C:

    split_calls(blob) -> [(method, [ids], [requests]), ...]   per method, in order of first appearance
    pack_replies(ids, responses) -> reply frames
    pack_counter_replies(ids, first) -> reply frames of a message whose field 1 (uint64) is
                                        first, first + 1, ... (an AppendResponse per call)
    decode_appends(ids, requests, max_payload) -> (ids, payloads, replica_ids, types, slow)

decode_appends reads log-service AppendRequests by hand (field 1 `payloads`, 2 `replica_id`, 3 `type`,
4 `raw`): a request of exactly one payload of at most max_payload bytes, not raw, with each field at
most once and nothing else, is decoded here; every other request (and any that does not parse) is
listed in `slow` (its position) for the protobuf path, which gives the exact semantics and errors.

The client's side of the same two messages (the log service client's append path, without protobuf):

    encode_append(payload, replica_id, type) -> the AppendRequest of one payload, byte for byte what
                                               protobuf serializes; None for arguments it does not take
                                               (the protobuf path then gives the exact errors)
    decode_counter(reply) -> field 1 (uint64) of a reply that holds only that field; -1 for any other
                             reply (the protobuf path parses it)

and the replicated log service client's (an RLsn reply is read by decode_counter too):

    encode_rappend(client, seq, type, prefix, payload) -> the RAppendRequest whose data is prefix +
                                               payload, as protobuf serializes it; None as above
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
cimport cython



cdef object _malformed(str msg):
    """MalformedFrames(msg) (imported here: engine.rpc imports this module while it initializes)."""
    from logtide.engine.rpc.call_frames import MalformedFrames
    return MalformedFrames(msg)

# the call and reply frames' layout is the framed carrier's (one format, one place)
from logtide._ext.varint cimport get_varint, put_uint_field, put_varint, uint_field_len, varint_len
from logtide._ext.wire_format cimport CALL_HEADER, REPLY_HEADER, get16, get32, get64, put32, put64


def split_calls(bytes blob):
    """[(method, ids, requests)] of every call frame in `blob`, grouped by method in order of first
    appearance (within a group in blob order). MalformedFrames when the blob does not split."""
    return split_call_frames(<const uint8_t*>PyBytes_AS_STRING(blob), PyBytes_GET_SIZE(blob))


@cython.boundscheck(False)
@cython.wraparound(False)
cdef list split_call_frames(const uint8_t* b, Py_ssize_t end):
    cdef Py_ssize_t pos = 0
    cdef uint64_t cid
    cdef uint32_t n
    cdef unsigned int m, last_m = 0x10000
    cdef list out = []
    cdef dict by_method = None       # made when a second method appears (most frames have one)
    cdef list ids = None
    cdef list reqs = None
    while pos < end:
        if end - pos < CALL_HEADER:
            raise _malformed(f"call frame at offset {pos}: {end - pos} bytes left, a header needs {CALL_HEADER}")
        cid = get64(b + pos)
        m = get16(b + pos + 8)
        n = get32(b + pos + 10)
        if n > end - pos - CALL_HEADER:
            raise _malformed(f"call frame {cid} at offset {pos}: length {n} runs "
                                  f"{n - (end - pos - CALL_HEADER)} bytes past the end of the batch")
        if m != last_m:
            g = None
            if last_m != 0x10000:
                if by_method is None:
                    by_method = {last_m: out[0]}
                g = by_method.get(m)
            if g is None:
                ids, reqs = [], []
                g = (m, ids, reqs)
                out.append(g)
                if by_method is not None:
                    by_method[m] = g
            else:
                ids, reqs = g[1], g[2]
            last_m = m
        ids.append(cid)
        reqs.append(PyBytes_FromStringAndSize(<const char*>b + pos + CALL_HEADER, n))
        pos += CALL_HEADER + n
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def pack_replies(list ids, list responses):
    """The reply frames of responses[k] (bytes) for call ids[k]."""
    cdef Py_ssize_t k, count = PyList_GET_SIZE(ids)
    cdef Py_ssize_t total = 0, pos = 0, n
    cdef uint8_t* o
    if PyList_GET_SIZE(responses) != count:
        raise ValueError("pack_replies needs one response per id")
    for r in responses:
        if type(r) is not bytes:
            raise TypeError(f"a response must be bytes, not {type(r).__name__}")
        total += REPLY_HEADER + PyBytes_GET_SIZE(r)
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    for k in range(count):
        r = <bytes>PyList_GET_ITEM(responses, k)
        n = PyBytes_GET_SIZE(r)
        put64(o + pos, <uint64_t>ids[k])
        put32(o + pos + 8, <uint32_t>n)
        memcpy(o + pos + REPLY_HEADER, PyBytes_AS_STRING(r), n)
        pos += REPLY_HEADER + n
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def pack_counter_replies(list ids, uint64_t first):
    """Reply frames for ids[k] of a message whose only field is field 1 (uint64) = first + k
    (proto3: a value of 0 is the empty message)."""
    cdef Py_ssize_t k, count = PyList_GET_SIZE(ids)
    cdef Py_ssize_t total = 0, pos = 0
    cdef uint64_t v
    cdef int vl
    cdef uint8_t* o
    if count and first + <uint64_t>(count - 1) < first:
        raise OverflowError("pack_counter_replies: first + len(ids) passes 2**64")
    for k in range(count):
        v = first + <uint64_t>k
        total += REPLY_HEADER + (1 + varint_len(v) if v else 0)
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    for k in range(count):
        v = first + <uint64_t>k
        put64(o + pos, <uint64_t>ids[k])
        if v == 0:
            put32(o + pos + 8, 0)
            pos += REPLY_HEADER
            continue
        vl = varint_len(v)
        put32(o + pos + 8, <uint32_t>(1 + vl))
        pos += REPLY_HEADER
        o[pos] = 0x08                      # field 1, varint
        pos += 1
        while v >= 0x80:
            o[pos] = <uint8_t>(v & 0x7F) | 0x80
            v >>= 7
            pos += 1
        o[pos] = <uint8_t>v
        pos += 1
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_appends(list ids, list requests, Py_ssize_t max_payload):
    """(ids, payloads, replica_ids, types, slow) of the plain one-payload AppendRequests among
    `requests` (see the module doc); `slow` lists the positions of all the others."""
    cdef Py_ssize_t k, count = PyList_GET_SIZE(requests)
    cdef Py_ssize_t pos, end, plen, pstart
    cdef const uint8_t* b
    cdef uint64_t key, v, rid, typ
    cdef int seen
    cdef bint ok
    cdef list f_ids = [], payloads = [], rids = [], types = [], slow = []
    if PyList_GET_SIZE(ids) != count:
        raise ValueError("decode_appends needs one id per request")
    for k in range(count):
        r = <object>PyList_GET_ITEM(requests, k)
        if type(r) is not bytes:
            slow.append(k)
            continue
        b = <const uint8_t*>PyBytes_AS_STRING(r)
        end = PyBytes_GET_SIZE(r)
        pos = 0
        seen = 0
        rid = 0
        typ = 0
        pstart = -1
        plen = 0
        ok = True
        while pos < end:
            pos = get_varint(b, pos, end, &key)
            if pos < 0:
                ok = False
                break
            if key == 0x0A and not (seen & 1):            # 1: payloads, length-delimited
                pos = get_varint(b, pos, end, &v)
                if pos < 0 or v > <uint64_t>(end - pos):
                    ok = False
                    break
                pstart, plen = pos, <Py_ssize_t>v
                pos += plen
                seen |= 1
            elif key == 0x10 and not (seen & 2):          # 2: replica_id, uint64
                pos = get_varint(b, pos, end, &rid)
                if pos < 0:
                    ok = False
                    break
                seen |= 2
            elif key == 0x18 and not (seen & 4):          # 3: type, uint32
                pos = get_varint(b, pos, end, &typ)
                if pos < 0 or typ > 0xFFFFFFFF:
                    ok = False
                    break
                seen |= 4
            elif key == 0x20 and not (seen & 8):          # 4: raw, bool: only false stays here
                pos = get_varint(b, pos, end, &v)
                if pos < 0 or v != 0:
                    ok = False
                    break
                seen |= 8
            else:
                ok = False
                break
        if not ok or not (seen & 1) or plen > max_payload:
            slow.append(k)
            continue
        f_ids.append(<object>PyList_GET_ITEM(ids, k))
        payloads.append(PyBytes_FromStringAndSize(<const char*>b + pstart, plen))
        rids.append(rid)
        types.append(typ)
    return f_ids, payloads, rids, types, slow


@cython.boundscheck(False)
@cython.wraparound(False)
def encode_append(payload, replica_id, rtype):
    """The serialized AppendRequest(payloads=[payload], replica_id=replica_id, type=rtype): fields in
    number order, zero scalars left out (proto3), as protobuf writes it. None unless payload is bytes,
    replica_id an int in [0, 2**64) and rtype an int in [0, 2**32) (bool is not an int here)."""
    cdef Py_ssize_t n, total, pos = 0
    cdef uint64_t rid, typ
    cdef uint8_t* o
    if type(payload) is not bytes or type(replica_id) is not int or type(rtype) is not int:
        return None
    if replica_id < 0 or replica_id >= (1 << 64) or rtype < 0 or rtype >= (1 << 32):
        return None
    rid = replica_id
    typ = rtype
    n = PyBytes_GET_SIZE(payload)
    total = 1 + varint_len(<uint64_t>n) + n + uint_field_len(rid) + uint_field_len(typ)
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    o[0] = 0x0A                                       # 1: payloads, length-delimited
    pos = put_varint(o, 1, <uint64_t>n)
    memcpy(o + pos, PyBytes_AS_STRING(payload), n)
    pos += n
    pos += put_uint_field(o + pos, 0x10, rid)         # 2: replica_id
    put_uint_field(o + pos, 0x18, typ)                # 3: type
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def encode_rappend(client, seq, rtype, bytes prefix not None, payload):
    """The serialized RAppendRequest(client, seq, type=rtype, data=prefix + payload) of the replicated
    log service, as protobuf writes it (fields in number order, zero scalars and empty data left
    out), without building the data in Python first. None unless payload is bytes, client and seq
    ints in [0, 2**64) and rtype an int in [0, 2**32) (bool is not an int here)."""
    cdef Py_ssize_t n, total, pos
    cdef uint64_t c, s, typ
    cdef Py_ssize_t plen = PyBytes_GET_SIZE(prefix)
    cdef uint8_t* o
    if type(payload) is not bytes or type(client) is not int or type(seq) is not int or type(rtype) is not int:
        return None
    if not (0 <= client < (1 << 64)) or not (0 <= seq < (1 << 64)) or not (0 <= rtype < (1 << 32)):
        return None
    c, s, typ = client, seq, rtype
    n = plen + PyBytes_GET_SIZE(payload)
    total = uint_field_len(c) + uint_field_len(s) + uint_field_len(typ)
    if n:
        total += 1 + varint_len(<uint64_t>n) + n
    out = PyBytes_FromStringAndSize(NULL, total)
    o = <uint8_t*>PyBytes_AS_STRING(out)
    pos = put_uint_field(o, 0x08, c)                  # 1: client
    pos += put_uint_field(o + pos, 0x10, s)           # 2: seq
    pos += put_uint_field(o + pos, 0x18, typ)         # 3: type
    if n:
        o[pos] = 0x22                                 # 4: data, length-delimited
        pos = put_varint(o, pos + 1, <uint64_t>n)
        memcpy(o + pos, PyBytes_AS_STRING(prefix), plen)
        memcpy(o + pos + plen, PyBytes_AS_STRING(payload), n - plen)
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def decode_counter(bytes reply):
    """Field 1 (uint64) of a reply message that holds field 1 at most once and nothing else (the
    empty message: 0); -1 for every other reply."""
    cdef const uint8_t* b = <const uint8_t*>PyBytes_AS_STRING(reply)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(reply)
    cdef Py_ssize_t pos
    cdef uint64_t v = 0
    if end == 0:
        return 0
    if b[0] != 0x08:
        return -1
    pos = get_varint(b, 1, end, &v)
    if pos != end:
        return -1
    return v
