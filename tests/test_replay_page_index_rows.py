"""PageIndex.add_rows (a small group, row by row) indexes what PageIndex.add (arrays) indexes."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.replay.page_index import PageIndex

tags = st.tuples(st.just(1663), st.just(5), st.integers(1, 3), st.just(0), st.integers(0, 5))


@scaled(max_examples=60, deadline=None)
@given(groups=st.lists(st.lists(st.lists(tags, min_size=1, max_size=3), min_size=1, max_size=8),
                       min_size=1, max_size=10))
def test_add_rows_indexes_what_add_indexes(tmp_path_factory, groups):
    rows, arrays = (PageIndex.open(tmp_path_factory.mktemp(n), "primary") for n in ("rows", "arrays"))
    try:
        lsn = 0
        for group in groups:   # one group: records with consecutive LSNs, each touching some pages
            ts, ls = [], []
            for rec_tags in group:
                lsn += 1
                ts.extend(rec_tags)
                ls.extend([lsn] * len(rec_tags))
            rows.add_rows(ts, ls)
            arrays.add(np.array(ts, dtype=np.uint32).reshape(-1, 5), np.array(ls, dtype=np.uint64))
        for a, b in zip(rows.range(0, lsn), arrays.range(0, lsn)):
            assert np.array_equal(a, b)
        for t in {t for g in groups for r in g for t in r}:
            assert np.array_equal(rows.lsns(t, 0, lsn), arrays.lsns(t, 0, lsn))
    finally:
        rows.close()
        arrays.close()
