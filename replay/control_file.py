"""The primary's control file: the checkpoint's consistent LSN, the redo start after a crash.

32 bytes, little-endian: magic u32 "LTCF", version u32, consistent LSN u64, next xid u64,
CRC-32C u32 of bytes 0..23, reserved u32. Written as temp file, fsync, rename, fsync of the
directory, so a crash leaves the old or the new file, never a mix.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from logtide._ext.durable_io import replace_file_durably
from logtide._ext.crc32c import crc32c
from logtide.errors import CorruptionError

MAGIC = 0x4643544C  # "LTCF"
VERSION = 1
_FMT = struct.Struct("<IIQQII")
NAME = "control"


class Control(NamedTuple):
    consistent_lsn: int
    next_xid: int


def read_control(directory: str | os.PathLike) -> Control:
    """The control file of `directory`, or Control(0, 1) when there is none yet."""
    path = Path(directory) / NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Control(0, 1)
    if len(raw) != _FMT.size:
        raise CorruptionError(f"{path}: control file is {len(raw)} bytes, expected {_FMT.size}")
    magic, version, lsn, xid, crc, _ = _FMT.unpack(raw)
    if magic != MAGIC or version != VERSION or crc32c(raw[:24]) != crc:
        raise CorruptionError(f"{path}: control file fails its magic/version/CRC check")
    return Control(lsn, xid)


def write_control(directory: str | os.PathLike, control: Control) -> None:
    d = Path(directory)
    head = struct.pack("<IIQQ", MAGIC, VERSION, control.consistent_lsn, control.next_xid)
    raw = head + struct.pack("<II", crc32c(head), 0)
    replace_file_durably(d / (NAME + ".tmp"), d / NAME, raw)
