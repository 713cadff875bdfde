"""The primary's single-tuple insert in one C call (_ext/primary_insert.pyx) against the primary's
Python steps (the path a leader committer takes): the same tids, the same WAL record bytes in the
same LSNs, the same page bytes, and the same typed errors, through buffer-pool hits, misses and
evictions of dirty pages, several relations and tuples that fill pages."""
import tempfile

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.replay.primary import Primary
from logtide.replay.row_address import rel_tag

RELS = (16384, 16385, 7)

# mostly small tuples, some that fill a page fast, some a page refuses
tuples = st.one_of(st.binary(min_size=1, max_size=120), st.integers(1500, 8200).map(lambda n: b"f" * n),
                   st.just(b""), st.just(b"x" * 8161))


def _run(directory, steps, fast: bool):
    p = Primary(directory, pool_pages=3, checkpoint_interval=0)   # 3 frames: misses and dirty evictions
    try:
        assert p._single is not None
        if not fast:
            p._single = None     # the Python steps
        out = []
        for rel, tup in steps:
            try:
                out.append(p.insert(rel, tup))
            except Exception as exc:   # the type is compared: both paths raise the same typed error
                out.append(type(exc))
        recs = [bytes(r) for _, r in p.wal.read(1, 1 << 30)] if p.write_lsn else []
        pages = {rel: [p.read_page(rel_tag(rel, b))[0] for b in range(p.nblocks(rel))] for rel in RELS}
        return out, recs, pages, p.pool.pins.tolist()
    finally:
        p.close()


@scaled(max_examples=25, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(RELS), tuples), min_size=1, max_size=30))
def test_single_insert_in_c_is_the_python_steps(steps):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        got = _run(a, steps, fast=True)
        want = _run(b, steps, fast=False)
    assert got[0] == want[0]          # tids and errors
    assert got[1] == want[1]          # WAL record bytes, LSN by LSN
    assert got[2] == want[2]          # page bytes
    assert got[3] == [0, 0, 0]        # nothing left pinned
