"""Hypothesis strategies for meta-service commands, shared by the determinism and model tests."""
from hypothesis import strategies as st

from logtide.engine.meta import AS_IS, DELETE, GE, ANY, Branch, Exact, cond, op
from logtide.engine.meta.command import MetaSpec, TxnCmd, UpsertCmd

from meta_clock import T0
KEYS = st.sampled_from(["a", "b", "c", "p/1", "p/2", "p/3", "q/x", "cnt", "s"])
PREFIXES = st.sampled_from(["", "p/", "q/", "c", "zz"])
VALUES = st.binary(max_size=6)
OPS_ = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
SEQS = st.integers(0, 12)
TTL = st.one_of(st.none(), st.integers(0, 3000))
MATCH = st.one_of(st.just(ANY), st.builds(Exact, SEQS), st.builds(GE, SEQS))

conditions = st.one_of(
    st.builds(cond.seq, KEYS, OPS_, SEQS),
    st.builds(cond.value, KEYS, OPS_, VALUES),
    st.builds(cond.prefix_count, PREFIXES, OPS_, st.integers(0, 5)))
ops = st.one_of(
    st.builds(op.get, KEYS),
    st.builds(op.put, KEYS, VALUES, ttl_ms=TTL, match_seq=st.one_of(st.none(), SEQS)),
    st.builds(op.delete, KEYS, match_seq=st.one_of(st.none(), SEQS)),
    st.builds(op.delete_by_prefix, PREFIXES),
    st.builds(op.fetch_add_u64, KEYS, st.integers(-5, 5), match_seq=st.one_of(st.none(), SEQS)),
    st.builds(op.put_sequential, st.just("q/"), st.just("s"), VALUES, ttl_ms=TTL))
exprs = st.recursive(conditions, lambda inner: st.one_of(
    st.builds(lambda xs: cond.all(*xs), st.lists(inner, max_size=3)),
    st.builds(lambda xs: cond.any(*xs), st.lists(inner, max_size=3))), max_leaves=5)
upserts = st.builds(
    lambda k, v, m, ttl, exp: UpsertCmd(k, v, m, None if ttl is None and exp is None else
                                        MetaSpec(ttl, None if ttl is not None else exp)),
    KEYS, st.one_of(VALUES, st.just(DELETE), st.just(AS_IS)), MATCH, TTL,
    st.one_of(st.none(), st.integers(T0 // 1000, T0 // 1000 + 5), st.integers(T0, T0 + 5000)))
txns = st.builds(
    lambda c, t, e, b: TxnCmd(tuple(c), tuple(t), tuple(e), tuple(b)),
    st.lists(conditions, max_size=3), st.lists(ops, max_size=4), st.lists(ops, max_size=3),
    st.lists(st.builds(Branch, st.one_of(st.none(), exprs), st.lists(ops, max_size=3)), max_size=2))
logs = st.lists(st.tuples(st.integers(0, 700), st.one_of(upserts, txns)), min_size=1, max_size=40)
