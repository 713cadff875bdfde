"""The state machine against a naive reference model (a dict, scans instead of indexes).

The machine keeps a sorted memtable, an expiry index and prefix bounds by bisection; the model
keeps a plain dict and scans it. Random logs must give identical replies, events and state.
"""
import os
import sys

from hypothesis import HealthCheck, given
from hypothesis_profiles import scaled

from logtide.engine.meta import AS_IS, DELETE, GE, ANY, Exact, KVMeta, MetaStateMachine, SeqV
from logtide.engine.meta.command import (
    Condition, DeleteByPrefixOp, DeleteOp, FetchAddU64Op, GetOp, PutOp, PutSequentialOp, UpsertCmd)
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse, TxnReply)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import meta_strategies as gen  # noqa: E402

U64 = (1 << 64) - 1
CMP = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


class Model:
    def __init__(self):
        self.kv, self.seq, self.events = {}, 0, []

    def _meta(self, spec, t):
        if spec is None:
            return KVMeta(None, t)
        if spec.ttl_ms is not None:
            return KVMeta(t + spec.ttl_ms, t)
        e = spec.expire_at
        return KVMeta(e if e > 100_000_000_000 else e * 1000, t)

    def _put(self, k, v):
        prev = self.kv.get(k)
        if v is None:
            del self.kv[k]
        else:
            self.kv[k] = v
        self.events.append((k, prev, v))

    def upsert(self, k, value, match, spec, t):
        prev = self.kv.get(k)
        cur = prev.seq if prev else 0
        ok = (match is ANY or (isinstance(match, Exact) and cur == match.seq)
              or (isinstance(match, GE) and cur >= match.seq))
        if not ok:
            return prev, prev
        if value is DELETE:
            if prev is None:
                return None, None
            self._put(k, None)
            return prev, None
        if value is AS_IS and prev is None:
            return None, None
        data = prev.data if value is AS_IS else value
        self.seq += 1
        new = SeqV(self.seq, data, self._meta(spec, t))
        self._put(k, new)
        return prev, new

    def fetch_add(self, k, delta, match, t):
        prev = self.kv.get(k)
        bs = prev.seq if prev else 0
        try:
            before = int(prev.data) if prev and prev.data.isdigit() and int(prev.data) <= U64 else 0
        except ValueError:
            before = 0
        if match is not None and match != bs:
            return TxnFetchAddU64Response(k, bs, before, bs, before)
        after = min(max(before + delta, 0), U64)
        self.seq += 1
        new = SeqV(self.seq, str(after).encode(), KVMeta(prev.meta.expire_at_ms if prev else None, t))
        self._put(k, new)
        return TxnFetchAddU64Response(k, bs, before, self.seq, after)

    def cond(self, c):
        if isinstance(c, Condition):
            if c.target == "prefix_count":
                return CMP[c.op](sum(1 for k in self.kv if k.startswith(c.key)), c.arg)
            v = self.kv.get(c.key)
            if c.target == "seq":
                return CMP[c.op](v.seq if v else 0, c.arg)
            return v is not None and CMP[c.op](v.data, c.arg)
        res = [self.cond(i) for i in c.items]
        return all(res) if c.kind == "all" else any(res)

    def op(self, o, t):
        if isinstance(o, GetOp):
            return TxnGetResponse(o.key, self.kv.get(o.key))
        if isinstance(o, PutOp):
            p, c = self.upsert(o.key, o.value, ANY if o.match_seq is None else Exact(o.match_seq), o.spec, t)
            return TxnPutResponse(o.key, p, c)
        if isinstance(o, DeleteOp):
            p, c = self.upsert(o.key, DELETE, ANY if o.match_seq is None else Exact(o.match_seq), None, t)
            return TxnDeleteResponse(o.key, p is not None and c is None, p)
        if isinstance(o, DeleteByPrefixOp):
            ks = sorted(k for k in self.kv if k.startswith(o.prefix))
            for k in ks:
                self._put(k, None)
            return TxnDeleteByPrefixResponse(o.prefix, len(ks))
        if isinstance(o, FetchAddU64Op):
            return self.fetch_add(o.key, o.delta, o.match_seq, t)
        if isinstance(o, PutSequentialOp):
            fa = self.fetch_add(o.sequence_key, 1, None, t)
            key = o.prefix + "%020d" % fa.before
            p, c = self.upsert(key, o.value, ANY, o.spec, t)
            return TxnPutResponse(key, p, c)

    def apply(self, t, cmd):
        for k, v in sorted(((k, v) for k, v in self.kv.items()
                            if v.meta.expire_at_ms is not None and v.meta.expire_at_ms < t),
                           key=lambda kv: (kv[1].meta.expire_at_ms, kv[1].seq)):
            self._put(k, None)
        if isinstance(cmd, UpsertCmd):
            return self.upsert(cmd.key, cmd.value, cmd.match_seq, cmd.spec, t)
        for i, b in enumerate(cmd.branches):
            if b.predicate is None or self.cond(b.predicate):
                return TxnReply(True, tuple(self.op(o, t) for o in b.ops), f"operation:{i}")
        ok = all(self.cond(c) for c in cmd.conditions)
        return TxnReply(ok, tuple(self.op(o, t) for o in (cmd.if_then if ok else cmd.else_then)),
                        "then" if ok else "else")


@scaled(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gen.logs)
def test_state_machine_matches_the_reference_model(log):
    sm, model = MetaStateMachine(), Model()
    events = []
    sm.subscribe(events.extend)
    t = gen.T0
    for i, (dt, cmd) in enumerate(log, start=1):
        t += dt
        assert sm.apply(i, t, cmd) == model.apply(t, cmd)
        assert events == model.events
        assert sm.items() == sorted(model.kv.items())
        assert sm.seq == model.seq
    for now in (t, t + 1000, t + 5000):
        for p in ("", "p/", "q/", "c"):
            expect = [(k, v) for k, v in sorted(model.kv.items()) if k.startswith(p)
                      and not (v.meta.expire_at_ms is not None and v.meta.expire_at_ms < now)]
            assert sm.list(p, None, now) == expect
            assert sm.list(p, 2, now) == expect[:2]


