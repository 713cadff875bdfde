"""The meta-service state machine: a sorted memtable of SeqV, the global seq, and expiry on log time.

`update(Entry)` is deterministic: the same entries in the same order give the same state and the
same replies on every replica, because the only clock it reads is the entry's own time_ms.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple

from sortedcontainers import SortedDict, SortedList

from logtide.engine.meta import meta_format as F
from logtide.engine.meta.command import (
    Command, Condition, DeleteByPrefixOp, DeleteOp, FetchAddU64Op, GetOp, MetaSpec, PutOp,
    PutSequentialOp, TxnCmd, UpsertCmd)
from logtide.engine.meta.log_entry import decode_entry
from logtide.engine.meta.match_seq import AS_IS, DELETE, ANY, Exact, MatchSeq
from logtide.engine.meta.node_info import AddNodeCmd, NodeInfo, RemoveNodeCmd
from logtide.engine.meta.seqv import KVMeta, SeqV, expire_at_to_ms
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse, TxnReply)
from logtide.engine.statemachine import Entry, StateMachine
from logtide.errors import CorruptionError, MetaClosedError, MetaError, MetaInvalidArgument

# one change of one key: (key, prev, current); prev != current always
Change = Tuple[str, Optional[SeqV], Optional[SeqV]]

_CMP = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def prefix_end(prefix: str) -> Optional[str]:
    """The smallest str above every str starting with `prefix` (None: no such bound)."""
    p = prefix.rstrip("\U0010ffff")
    if not p:
        return None
    last = ord(p[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # skip the surrogate block, no key can hold those
        last = 0xE000
    return p[:-1] + chr(last)


def parse_u64(data: Optional[bytes]) -> int:
    """The counter value of fetch_add_u64: ASCII decimal u64; a missing or non-u64 value counts as 0."""
    if data is None or not data.isdigit() or len(data) > 20:
        return 0
    v = int(data)
    return v if v <= F.U64_MAX else 0


class MetaStateMachine(StateMachine):
    """Sorted memtable + expiry index + global seq, applied entry by entry."""

    def __init__(self) -> None:
        self._kv: SortedDict = SortedDict()
        self._expiry: SortedList = SortedList()   # (expire_at_ms, seq, key): removal order
        self._seq = 0
        self._applied = 0
        self._time_ms = 0
        self._listeners: List[Tuple[Callable, bool]] = []   # (listener, indexed)
        self._nodes: Dict[int, NodeInfo] = {}       # node information, apart from Raft membership
        self._closed = False

    # ------------------------------------------------------------------ state accessors
    @property
    def seq(self) -> int:
        """The last seq handed out."""
        return self._seq

    @property
    def applied_index(self) -> int:
        """The index (LSN) of the last applied entry."""
        return self._applied

    @property
    def last_time_ms(self) -> int:
        """The largest entry time applied so far."""
        return self._time_ms

    def __len__(self) -> int:
        return len(self._kv)

    def nodes(self) -> Dict[int, NodeInfo]:
        """The node records (AddNode / RemoveNode), by id."""
        return dict(self._nodes)

    def subscribe(self, listener: Callable, indexed: bool = False) -> None:
        """Call `listener(changes)` (indexed: `listener(index, changes)`, with the entry's log
        index) after every applied entry that changed something."""
        self._listeners.append((listener, indexed))

    def unsubscribe(self, listener) -> None:
        self._listeners = [(f, i) for f, i in self._listeners if f != listener]

    # ------------------------------------------------------------------ applying
    def update(self, entry: Entry):
        """Apply one log entry; returns (prev, result) for an upsert, a TxnReply for a txn."""
        time_ms, cmd = decode_entry(entry.cmd)
        return self.apply(entry.index, time_ms, cmd)

    def apply(self, index: int, time_ms: int, cmd: Command):
        """update() on an already decoded entry."""
        if self._closed:
            raise MetaClosedError("the state machine is closed")
        if index <= self._applied:
            raise MetaError(f"entry {index} is not after the last applied entry {self._applied}")
        changes: List[Change] = []
        self._clean_expired(time_ms, changes)
        self._applied = index
        if time_ms > self._time_ms:
            self._time_ms = time_ms
        if isinstance(cmd, UpsertCmd):
            reply = self._upsert(cmd.key, cmd.value, cmd.match_seq, cmd.spec, time_ms, changes)
        elif isinstance(cmd, TxnCmd):
            reply = self._txn(cmd, time_ms, changes)
        elif isinstance(cmd, AddNodeCmd):
            reply = self._nodes.get(cmd.node.node_id)      # the record before
            if reply is None or cmd.overriding:
                self._nodes[cmd.node.node_id] = cmd.node
        elif isinstance(cmd, RemoveNodeCmd):
            reply = self._nodes.pop(cmd.node_id, None)
        else:
            raise MetaError(f"not a command: {cmd!r}")
        if changes:
            for listener, indexed in list(self._listeners):
                if indexed:
                    listener(index, changes)
                else:
                    listener(changes)
        return reply

    def _clean_expired(self, time_ms: int, changes: List[Change]) -> None:
        exp = self._expiry
        while exp and exp[0][0] < time_ms:
            _, _, key = exp.pop(0)
            prev = self._kv.pop(key)
            changes.append((key, prev, None))

    def _set(self, key: str, prev: Optional[SeqV], new: Optional[SeqV], changes: List[Change]) -> None:
        if prev is not None and prev.meta.expire_at_ms is not None:
            self._expiry.remove((prev.meta.expire_at_ms, prev.seq, key))
        if new is None:
            del self._kv[key]
        else:
            self._kv[key] = new
            if new.meta.expire_at_ms is not None:
                self._expiry.add((new.meta.expire_at_ms, new.seq, key))
        changes.append((key, prev, new))

    @staticmethod
    def _kv_meta(spec: Optional[MetaSpec], time_ms: int) -> KVMeta:
        if spec is None:
            return KVMeta(None, time_ms)
        if spec.ttl_ms is not None:
            return KVMeta(min(time_ms + spec.ttl_ms, F.U64_MAX), time_ms)
        if spec.expire_at is not None:
            return KVMeta(min(expire_at_to_ms(spec.expire_at), F.U64_MAX), time_ms)
        return KVMeta(None, time_ms)

    def _upsert(self, key: str, value, match_seq: MatchSeq, spec: Optional[MetaSpec], time_ms: int,
                changes: List[Change]) -> Tuple[Optional[SeqV], Optional[SeqV]]:
        prev = self._kv.get(key)
        if not match_seq.matches(prev.seq if prev is not None else 0):
            return prev, prev
        if value is DELETE:
            if prev is None:
                return None, None
            self._set(key, prev, None, changes)
            return prev, None
        if value is AS_IS:
            if prev is None:
                return None, None
            data = prev.data
        else:
            data = value
        self._seq += 1
        new = SeqV(self._seq, data, self._kv_meta(spec, time_ms))
        self._set(key, prev, new, changes)
        return prev, new

    # ------------------------------------------------------------------ transactions
    def _count_prefix(self, prefix: str) -> int:
        end = prefix_end(prefix)
        lo = self._kv.bisect_left(prefix)
        hi = len(self._kv) if end is None else self._kv.bisect_left(end)
        return hi - lo

    def _eval_cond(self, c: Condition) -> bool:
        cmp = _CMP[c.op]
        if c.target == F.TARGET_PREFIX_COUNT:
            return cmp(self._count_prefix(c.key), c.arg)
        cur = self._kv.get(c.key)
        if c.target == F.TARGET_SEQ:
            return cmp(cur.seq if cur is not None else 0, c.arg)
        if cur is None:  # a value condition on a missing key is false for every operator
            return False
        return cmp(cur.data, c.arg)

    def _eval_expr(self, e) -> bool:
        if isinstance(e, Condition):
            return self._eval_cond(e)
        if e.kind == F.EXPR_ALL:
            return all(self._eval_expr(i) for i in e.items)
        return any(self._eval_expr(i) for i in e.items)

    def _txn(self, cmd: TxnCmd, time_ms: int, changes: List[Change]) -> TxnReply:
        for i, branch in enumerate(cmd.branches):
            if branch.predicate is None or self._eval_expr(branch.predicate):
                return TxnReply(True, self._run_ops(branch.ops, time_ms, changes), f"operation:{i}")
        ok = all(self._eval_cond(c) for c in cmd.conditions)
        ops = cmd.if_then if ok else cmd.else_then
        return TxnReply(ok, self._run_ops(ops, time_ms, changes), "then" if ok else "else")

    def _run_ops(self, ops, time_ms: int, changes: List[Change]) -> tuple:
        return tuple(self._run_op(o, time_ms, changes) for o in ops)

    def _run_op(self, o, time_ms: int, changes: List[Change]):
        if isinstance(o, GetOp):
            return TxnGetResponse(o.key, self._kv.get(o.key))
        if isinstance(o, PutOp):
            m = ANY if o.match_seq is None else Exact(o.match_seq)
            prev, cur = self._upsert(o.key, o.value, m, o.spec, time_ms, changes)
            return TxnPutResponse(o.key, prev, cur)
        if isinstance(o, DeleteOp):
            m = ANY if o.match_seq is None else Exact(o.match_seq)
            prev, cur = self._upsert(o.key, DELETE, m, None, time_ms, changes)
            return TxnDeleteResponse(o.key, prev is not None and cur is None, prev)
        if isinstance(o, DeleteByPrefixOp):
            end = prefix_end(o.prefix)
            keys = list(self._kv.irange(o.prefix, end, inclusive=(True, False)))
            for k in keys:
                self._set(k, self._kv[k], None, changes)
            return TxnDeleteByPrefixResponse(o.prefix, len(keys))
        if isinstance(o, FetchAddU64Op):
            return self._fetch_add(o.key, o.delta, o.match_seq, time_ms, changes)
        if isinstance(o, PutSequentialOp):
            fa = self._fetch_add(o.sequence_key, 1, None, time_ms, changes)
            key = o.prefix + str(fa.before).zfill(F.SEQUENTIAL_KEY_DIGITS)
            prev, cur = self._upsert(key, o.value, ANY, o.spec, time_ms, changes)
            return TxnPutResponse(key, prev, cur)
        raise MetaError(f"not an op: {o!r}")

    def _fetch_add(self, key: str, delta: int, match_seq: Optional[int], time_ms: int,
                   changes: List[Change]) -> TxnFetchAddU64Response:
        prev = self._kv.get(key)
        before_seq = prev.seq if prev is not None else 0
        before = parse_u64(prev.data if prev is not None else None)
        if match_seq is not None and match_seq != before_seq:
            return TxnFetchAddU64Response(key, before_seq, before, before_seq, before)
        after = min(max(before + delta, 0), F.U64_MAX)   # saturating both ways
        self._seq += 1
        # the counter keeps its lease: a fetch-add moves the value, not the expiry
        expire = prev.meta.expire_at_ms if prev is not None else None
        new = SeqV(self._seq, str(after).encode("ascii"), KVMeta(expire, time_ms))
        self._set(key, prev, new, changes)
        return TxnFetchAddU64Response(key, before_seq, before, new.seq, after)

    # ------------------------------------------------------------------ reads (local time)
    def get_maybe_expired(self, key: str) -> Optional[SeqV]:
        """The stored value, even if it has expired at local time (it is removed at the next apply)."""
        return self._kv.get(key)

    def get(self, key: str, now_ms: int) -> Optional[SeqV]:
        v = self._kv.get(key)
        if v is None or v.is_expired(now_ms):
            return None
        return v

    def mget(self, keys, now_ms: int) -> List[Optional[SeqV]]:
        return [self.get(k, now_ms) for k in keys]

    def list(self, prefix: str, limit: Optional[int], now_ms: int) -> List[Tuple[str, SeqV]]:
        out: List[Tuple[str, SeqV]] = []
        if limit is not None and limit <= 0:
            return out
        for k in self._kv.irange(prefix, prefix_end(prefix), inclusive=(True, False)):
            v = self._kv[k]
            if not v.is_expired(now_ms):
                out.append((k, v))
                if limit is not None and len(out) >= limit:
                    break
        return out

    def range(self, key: str, key_end: Optional[str], now_ms: int) -> Iterator[Tuple[str, SeqV]]:
        """Live keys in [key, key_end); key_end None means the single key."""
        if key_end is None:
            v = self.get(key, now_ms)
            if v is not None:
                yield key, v
            return
        for k in list(self._kv.irange(key, key_end, inclusive=(True, False))):
            v = self._kv[k]
            if not v.is_expired(now_ms):
                yield k, v

    def items(self) -> List[Tuple[str, SeqV]]:
        """Every stored (key, SeqV), expired or not, in key order: the whole state for comparisons."""
        return list(self._kv.items())

    def lookup(self, query):
        """query: ("get", key, now_ms) | ("mget", keys, now_ms) | ("list", prefix, limit, now_ms) | ("nodes",)."""
        kind = query[0]
        if kind == "get":
            return self.get(query[1], query[2])
        if kind == "mget":
            return self.mget(query[1], query[2])
        if kind == "list":
            return self.list(query[1], query[2], query[3])
        if kind == "nodes":
            return self.nodes()
        raise MetaError(f"unknown lookup {kind!r}")

    # ------------------------------------------------------------------ snapshots
    def save_snapshot(self, out: BinaryIO) -> int:
        from logtide import crc32c
        parts = [F.SNAPSHOT_HEADER.pack(F.SNAPSHOT_MAGIC, F.SNAPSHOT_VERSION, self._applied, self._seq,
                                        self._time_ms, len(self._kv))]
        rec = F.SNAPSHOT_RECORD.pack
        none = F.SNAPSHOT_NONE
        for k, v in self._kv.items():
            kb = k.encode("utf-8")
            e, p = v.meta.expire_at_ms, v.meta.proposed_at_ms
            parts.append(rec(len(kb), len(v.data), v.seq, none if e is None else e, none if p is None else p))
            parts.append(kb)
            parts.append(v.data)
        parts.append(F.SNAPSHOT_NODES.pack(len(self._nodes)))
        for nid, n in sorted(self._nodes.items()):
            ab = n.address.encode("utf-8")
            parts.append(F.SNAPSHOT_NODE.pack(nid, F.SNAPSHOT_ROLES.index(n.role), len(ab)))
            parts.append(ab)
        body = b"".join(parts)
        out.write(body)
        out.write(F.SNAPSHOT_TRAILER.pack(crc32c(body)))
        return self._applied

    def recover_from_snapshot(self, src: BinaryIO) -> int:
        from logtide import crc32c
        raw = src.read()
        hs, ts = F.SNAPSHOT_HEADER.size, F.SNAPSHOT_TRAILER.size
        if len(raw) < hs + ts:
            raise CorruptionError(f"meta snapshot is {len(raw)} bytes, too short")
        body, (crc,) = raw[:-ts], F.SNAPSHOT_TRAILER.unpack(raw[-ts:])
        if crc32c(body) != crc:
            raise CorruptionError("meta snapshot CRC mismatch")
        magic, version, applied, seq, time_ms, count = F.SNAPSHOT_HEADER.unpack_from(body, 0)
        if magic != F.SNAPSHOT_MAGIC or version not in F.SNAPSHOT_VERSIONS:
            raise CorruptionError(f"not a meta snapshot (magic {magic!r}, version {version})")
        kv, expiry = SortedDict(), SortedList()
        pos, rs, none = hs, F.SNAPSHOT_RECORD.size, F.SNAPSHOT_NONE
        try:
            for _ in range(count):
                klen, dlen, vseq, e, p = F.SNAPSHOT_RECORD.unpack_from(body, pos)
                pos += rs
                key = body[pos:pos + klen].decode("utf-8")
                pos += klen
                data = body[pos:pos + dlen]
                pos += dlen
                if len(data) != dlen:
                    raise CorruptionError("meta snapshot record runs past the end")
                meta = KVMeta(None if e == none else e, None if p == none else p)
                kv[key] = SeqV(vseq, data, meta)
                if meta.expire_at_ms is not None:
                    expiry.add((meta.expire_at_ms, vseq, key))
            nodes: Dict[int, NodeInfo] = {}
            if version >= 2:
                (n_nodes,) = F.SNAPSHOT_NODES.unpack_from(body, pos)
                pos += F.SNAPSHOT_NODES.size
                for _ in range(n_nodes):
                    nid, role, alen = F.SNAPSHOT_NODE.unpack_from(body, pos)
                    pos += F.SNAPSHOT_NODE.size
                    addr = body[pos:pos + alen].decode("utf-8")
                    pos += alen
                    if role >= len(F.SNAPSHOT_ROLES):
                        raise CorruptionError(f"meta snapshot node {nid} has an unknown role {role}")
                    nodes[nid] = NodeInfo(nid, addr, F.SNAPSHOT_ROLES[role])
        except (struct.error, UnicodeDecodeError, MetaInvalidArgument) as exc:
            raise CorruptionError(f"meta snapshot record is damaged: {exc}") from None
        if pos != len(body) or len(kv) != count:
            raise CorruptionError("meta snapshot length does not match its key count")
        self._kv, self._expiry, self._nodes = kv, expiry, nodes
        self._seq, self._applied, self._time_ms = seq, applied, time_ms
        return applied

    def close(self) -> None:
        self._closed = True
        self._listeners.clear()


