"""ClusterLayout: a local cluster's processes, addresses and options, kept in D/cluster.json.

Every `logtide cluster` command named with `--dir D` reads it, so commands work from any shell.
It is replaced atomically (written to a temporary file, fsynced, renamed) whenever it changes.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

from logtide.errors import ClusterError, UnknownClusterProcess

FILE = "cluster.json"
VERSION = 1
ROLES = ("logservice", "spare", "meta", "primary", "ro", "tn", "cn")


@dataclass
class ProcessRecord:
    """One process of the cluster: `role#id`, the address its clients connect to ("" for a CN),
    its pid and its start time (to tell it from a later process that reuses the pid)."""
    role: str
    id: int
    address: str
    argv: list
    log: str
    pid: int = 0
    start_time: int = 0

    def __post_init__(self) -> None:
        # a hand-edited layout ("pid": "abc") must fail here, not as a TypeError deep in status/down
        kinds = {"role": str, "id": int, "address": str, "argv": list, "log": str, "pid": int, "start_time": int}
        for name, kind in kinds.items():
            v = getattr(self, name)
            if not isinstance(v, kind) or isinstance(v, bool):
                raise TypeError(f"{name} must be a {kind.__name__}, got {v!r}")

    @property
    def name(self) -> str:
        return f"{self.role}#{self.id}"


@dataclass
class ClusterLayout:
    """The cluster under `dir`: its processes in start order and the options it was made with."""
    dir: str
    processes: list = field(default_factory=list)
    options: dict = field(default_factory=dict)

    @classmethod
    def load(cls, d: str) -> "ClusterLayout":
        path = os.path.join(d, FILE)
        try:
            with open(path) as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise ClusterError(f"{d} holds no cluster ({FILE} is missing): start one with `logtide cluster up "
                               f"--dir {d}`") from None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"{path} does not read as a cluster layout: {exc}") from None
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            raise ClusterError(f"{path}: not a version-{VERSION} cluster layout")
        try:
            procs = [ProcessRecord(**p) for p in raw["processes"]]
        except (KeyError, TypeError) as exc:
            raise ClusterError(f"{path}: a malformed process record: {exc}") from None
        return cls(os.path.abspath(d), procs, raw.get("options", {}))

    def save(self) -> None:
        path = os.path.join(self.dir, FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"version": VERSION, "dir": self.dir, "options": self.options,
                       "processes": [asdict(p) for p in self.processes]}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def of_role(self, role: str) -> list:
        return [p for p in self.processes if p.role == role]

    def find(self, name: str) -> ProcessRecord:
        """The process named ROLE#N; UnknownClusterProcess when there is none."""
        role, sep, n = name.partition("#")
        if role not in ROLES:
            raise UnknownClusterProcess(f"{name!r}: the roles are {', '.join(ROLES)} (as ROLE#N)")
        if not sep or not n.isdigit():
            raise UnknownClusterProcess(f"{name!r}: name a process as ROLE#N, e.g. {role}#1")
        for p in self.processes:
            if p.role == role and p.id == int(n):
                return p
        have = ", ".join(p.name for p in self.of_role(role)) or "none"
        raise UnknownClusterProcess(f"the cluster has no {name} ({role} processes: {have})")

    def get(self, role: str, pid_id: int) -> Optional[ProcessRecord]:
        for p in self.processes:
            if p.role == role and p.id == pid_id:
                return p
        return None
