"""The WAL-meta stream format: batches primary -> RO, feedback RO -> primary.

One format for every transport (in-process queues carry the same bytes as gRPC messages), so
one decoder checks every message: magic, version, lengths and CRC-32C. A truncated or altered
message raises StreamFormatError and is never applied. Layout, all little-endian:

Batch (kind 1; a heartbeat is a batch of 0 records):
    0  u32 magic "LTWM"      4  u16 version (1)    6  u16 kind (1)
    8  u64 write LSN        16  u64 consistent LSN
   24  u32 record count n   28  u32 body length    32  u32 CRC-32C (header with this field 0, then body)
   36  u32 reserved (0)
   40  body: n x u64 LSN, n x u32 meta length, the n metas back to back

Feedback (kind 2), 48 bytes:
    0  u32 magic  4 u16 version  6 u16 kind (2)  8 u64 node id  16 u64 apply LSN
   24  u64 min used LSN  32 u64 sequence  40 u32 CRC-32C (bytes 0..39)  44 u32 reserved
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

import numpy as np

from logtide._ext.crc32c import crc32c
from logtide.errors import CorruptionError

MAGIC = 0x4D57544C  # "LTWM"
VERSION = 1
KIND_BATCH = 1
KIND_FEEDBACK = 2
BATCH_HEADER = struct.Struct("<IHHQQIIII")
FEEDBACK = struct.Struct("<IHHQQQQII")
assert BATCH_HEADER.size == 40 and FEEDBACK.size == 48
MAX_BATCH_BYTES = 64 << 20


class StreamFormatError(CorruptionError):
    """A WAL-meta stream message is truncated, altered or not a stream message at all."""


class MetaBatch(NamedTuple):
    write_lsn: int
    consistent_lsn: int
    lsns: np.ndarray      # uint64 (n,)
    metas: np.ndarray     # uint8, the metas back to back
    offsets: np.ndarray   # int64 (n + 1,)

    def __len__(self) -> int:  # records, not fields
        return len(self.lsns)

    def meta(self, i: int) -> bytes:
        return self.metas[self.offsets[i]:self.offsets[i + 1]].tobytes()


class Feedback(NamedTuple):
    node_id: int
    apply_lsn: int
    min_used_lsn: int
    seq: int


def encode_batch(lsns: Sequence[int], metas: Sequence[bytes], write_lsn: int, consistent_lsn: int) -> bytes:
    """One batch message of consecutive-in-order records (LSNs ascending)."""
    n = len(lsns)
    if len(metas) != n:
        raise ValueError("as many metas as LSNs")
    body = b"".join([np.asarray(lsns, dtype="<u8").tobytes(),
                     np.asarray([len(m) for m in metas], dtype="<u4").tobytes()] + list(metas))
    if len(body) > MAX_BATCH_BYTES:
        raise ValueError(f"a batch body is at most {MAX_BATCH_BYTES} bytes")
    head = BATCH_HEADER.pack(MAGIC, VERSION, KIND_BATCH, write_lsn, consistent_lsn, n, len(body), 0, 0)
    crc = crc32c(body, crc32c(head))
    return BATCH_HEADER.pack(MAGIC, VERSION, KIND_BATCH, write_lsn, consistent_lsn, n, len(body), crc, 0) + body


def _kind(msg: bytes) -> int:
    if len(msg) < 8:
        raise StreamFormatError(f"stream message of {len(msg)} bytes is shorter than any header")
    magic, version, kind = struct.unpack_from("<IHH", msg, 0)
    if magic != MAGIC:
        raise StreamFormatError(f"bad stream magic 0x{magic:08x}")
    if version != VERSION:
        raise StreamFormatError(f"unknown stream version {version}")
    return kind


def decode_batch(msg: bytes) -> MetaBatch:
    """Parse and verify a batch message; raises StreamFormatError."""
    msg = bytes(msg)
    if _kind(msg) != KIND_BATCH:
        raise StreamFormatError("not a WAL-meta batch message")
    if len(msg) < BATCH_HEADER.size:
        raise StreamFormatError("truncated batch header")
    _, _, _, write_lsn, consistent_lsn, n, body_len, crc, _ = BATCH_HEADER.unpack_from(msg, 0)
    if len(msg) != BATCH_HEADER.size + body_len:
        raise StreamFormatError(f"batch body is {len(msg) - BATCH_HEADER.size} bytes, header says {body_len}")
    head = msg[:32] + b"\0\0\0\0" + msg[36:40]
    if crc32c(msg[40:], crc32c(head)) != crc:
        raise StreamFormatError("batch CRC-32C mismatch")
    if 12 * n > body_len:
        raise StreamFormatError("batch record count does not fit its body")
    lsns = np.frombuffer(msg, dtype="<u8", count=n, offset=40).astype(np.uint64)
    lens = np.frombuffer(msg, dtype="<u4", count=n, offset=40 + 8 * n).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    start = 40 + 12 * n
    if start + int(offsets[-1]) != len(msg):
        raise StreamFormatError("batch meta lengths do not add up to the body")
    if n > 1 and not (np.diff(lsns.astype(np.int64)) > 0).all():
        raise StreamFormatError("batch LSNs are not ascending")
    return MetaBatch(write_lsn, consistent_lsn, lsns, np.frombuffer(msg, dtype=np.uint8, offset=start), offsets)


def encode_feedback(node_id: int, apply_lsn: int, min_used_lsn: int, seq: int = 0) -> bytes:
    head = FEEDBACK.pack(MAGIC, VERSION, KIND_FEEDBACK, node_id, apply_lsn, min_used_lsn, seq, 0, 0)
    return FEEDBACK.pack(MAGIC, VERSION, KIND_FEEDBACK, node_id, apply_lsn, min_used_lsn, seq,
                         crc32c(head[:40]), 0)


def decode_feedback(msg: bytes) -> Feedback:
    msg = bytes(msg)
    if _kind(msg) != KIND_FEEDBACK:
        raise StreamFormatError("not a feedback message")
    if len(msg) != FEEDBACK.size:
        raise StreamFormatError(f"feedback is {FEEDBACK.size} bytes, got {len(msg)}")
    _, _, _, node, apply_lsn, min_used, seq, crc, reserved = FEEDBACK.unpack(msg)
    if crc32c(msg[:40]) != crc or reserved:
        raise StreamFormatError("feedback CRC-32C mismatch")
    return Feedback(node, apply_lsn, min_used, seq)
