"""The output of a partitioned replay: a page store written into a temporary directory by the
tasks, then committed by the driver with a manifest and one rename.

Layout of a committed out_dir: one file per relation fork, `{spc}_{db}_{rel}_{fork}`, block n at
offset n * 8192 (the layout of `replay/page_store.py`, checksums stamped), and `MANIFEST.json`
(target LSN, plan, partitions, pages, per-relation block count and CRC-32C). A directory without
MANIFEST.json is never a finished output; a failed job removes its temporary directory.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid

import numpy as np

from logtide.fsync_dir import fsync_dir
from logtide._ext import page as pg
from logtide._ext.crc32c import crc32c
from logtide.spark.errors import ReplayInputError

PAGE_SIZE = 8192
MANIFEST = "MANIFEST.json"
FORMAT = "logtide-spark-pages-1"


def rel_name(spc: int, db: int, rel: int, fork: int) -> str:
    return f"{spc}_{db}_{rel}_{fork}"


def temp_dir_for(out_dir: str) -> str:
    """A fresh hidden sibling of out_dir (same filesystem, so the commit is one rename)."""
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir):
        raise ReplayInputError(f"output directory {out_dir} already exists")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{uuid.uuid4().hex[:12]}")
    os.mkdir(tmp)
    return tmp


class PageWriter:
    """Writes a task's pages into the temporary directory (pwrite at block * 8192), then fsyncs."""

    def __init__(self, directory: str):
        self.dir = directory
        self._fds: dict[tuple, int] = {}

    def write(self, tags: np.ndarray, pages: np.ndarray) -> np.ndarray:
        """Stamp checksums and write pages[i] at tags[i]; returns the CRC-32C of each written page."""
        pg.set_checksum_many(pages, np.ascontiguousarray(tags[:, 4]))
        crcs = np.empty(len(tags), np.uint32)
        for i, t in enumerate(tags.tolist()):   # one call per page, never per record
            key = tuple(t[:4])
            fd = self._fds.get(key)
            if fd is None:
                fd = os.open(os.path.join(self.dir, rel_name(*key)), os.O_WRONLY | os.O_CREAT, 0o644)
                self._fds[key] = fd
            os.pwrite(fd, pages[i], t[4] * PAGE_SIZE)
            crcs[i] = crc32c(pages[i])
        return crcs

    def close(self) -> None:
        for fd in self._fds.values():
            os.fsync(fd)
            os.close(fd)
        self._fds.clear()


def commit(tmp: str, out_dir: str, tags: np.ndarray, page_lsns: np.ndarray, crcs: np.ndarray, *,
           target_lsn: int, plan: str, partitions: int) -> dict:
    """Write the manifest into tmp and rename tmp to out_dir; returns the manifest."""
    order = np.lexsort(tuple(tags[:, j] for j in range(4, -1, -1)))
    tags, page_lsns, crcs = tags[order], page_lsns[order], crcs[order]
    rels = {}
    if len(tags):
        keys = tags[:, :4]
        cut = np.nonzero(np.any(keys[1:] != keys[:-1], axis=1))[0] + 1
        for a, z in zip(np.r_[0, cut], np.r_[cut, len(tags)]):
            spc, db, rel, fork = (int(v) for v in keys[a])
            rels[rel_name(spc, db, rel, fork)] = {
                "blocks": int(tags[z - 1, 4]) + 1, "pages": int(z - a),
                "max_page_lsn": int(page_lsns[a:z].max()),
                # CRC-32C over the per-page CRC-32Cs in block order
                "crc32c": crc32c(np.ascontiguousarray(crcs[a:z]).tobytes()),
            }
    manifest = {"format": FORMAT, "target_lsn": int(target_lsn), "plan": plan, "partitions": int(partitions),
                "pages": int(len(tags)), "relations": rels}
    path = os.path.join(tmp, MANIFEST)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    os.rename(tmp, out_dir)
    fsync_dir(os.path.dirname(os.path.abspath(out_dir)))
    return manifest


def abort(tmp: str) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def read_manifest(out_dir: str) -> dict:
    """The manifest of a committed output (FileNotFoundError when there is none)."""
    with open(os.path.join(out_dir, MANIFEST)) as f:
        return json.load(f)


def read_page(out_dir: str, tag) -> bytes:
    """One page of an output page store (all zero when the block was never written)."""
    spc, db, rel, fork, block = (int(v) for v in tag)
    try:
        with open(os.path.join(out_dir, rel_name(spc, db, rel, fork)), "rb") as f:
            f.seek(block * PAGE_SIZE)
            data = f.read(PAGE_SIZE)
    except FileNotFoundError:
        data = b""
    return data + bytes(PAGE_SIZE - len(data))
