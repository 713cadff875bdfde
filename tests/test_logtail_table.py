"""The logtail table: paged by born_ts, two-level binary search, truncation, against a plain list."""
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logtail.logtail_table import Handle, LogtailTable


@scaled(max_examples=200, deadline=None)
@given(gaps=st.lists(st.integers(1, 5), min_size=0, max_size=300), page=st.integers(1, 17),
       queries=st.lists(st.tuples(st.integers(0, 1600), st.integers(0, 1600)), max_size=20),
       cut=st.integers(0, 1600))
def test_ranges_match_a_linear_scan(gaps, page, queries, cut):
    lt = LogtailTable(page_size=page)
    ts, all_ts = 0, []
    for g in gaps:
        ts += g
        lt.append(Handle(ts, {"t" if ts % 3 else "u": [ts]}))
        all_ts.append(ts)
    for lo, hi in queries:
        got = [t for t, _, _ in lt.visit(lo, hi)]
        assert got == [t for t in all_ts if lo < t <= hi]
        assert [t for t, _, _ in lt.visit(lo, hi, "u")] == [t for t in all_ts if lo < t <= hi and t % 3 == 0]
    snap = list(lt.visit(0, 1 << 40))
    lt.truncate(cut)
    assert [t for t, _, _ in lt.visit(0, 1 << 40)] == [t for t in all_ts if t > cut]
    assert len(lt) == len([t for t in all_ts if t > cut])
    assert len(snap) == len(all_ts)
