"""ColumnBatch (numpy columns, Arrow IPC bytes made by concatenation) against pyarrow: the bytes are
exactly what pyarrow's stream writer writes for the same table, the table it builds is the same
table, and merging batches with numpy gives the rows pa.concat_tables gives."""
import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logtail.column_batch import BatchLayout, ColumnBatch
from logtide.engine.logtail.logtail_format import Entry, concat_batches, ipc_table

# every dtype a table may have; bool (bit-packed in Arrow) goes through pyarrow
DTYPES = ["<i8", "<i4", "<i2", "i1", "<u8", "<u4", "<u2", "u1", "<f8", "<f4", "<f2", "?"]


def reference(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def arrays(rng, dtypes, n):
    out = []
    for d in dtypes:
        dt = np.dtype(d)
        if dt.kind == "b":
            out.append(rng.integers(0, 2, n).astype(bool))
        elif dt.kind == "f":
            out.append((rng.standard_normal(n) * 1000).astype(dt))
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max, n, dtype=np.int64 if info.min < 0 else np.uint64,
                                    endpoint=True).astype(dt))
    return out


@scaled(max_examples=80, deadline=None)
@given(dtypes=st.lists(st.sampled_from(DTYPES), min_size=1, max_size=6),
       sizes=st.lists(st.one_of(st.integers(0, 9), st.integers(250, 300)), min_size=1, max_size=4),
       seed=st.integers(0, 2**32 - 1))
def test_column_batches_match_pyarrow(dtypes, sizes, seed):
    rng = np.random.default_rng(seed)
    layout = BatchLayout([(f"c{i}", np.dtype(d)) for i, d in enumerate(dtypes)])
    batches = []
    for n in sizes:
        cols = arrays(rng, dtypes, n)
        # a strided view must give the same bytes as its contiguous copy
        cols = [np.repeat(a, 2)[::2] if k % 2 else a for k, a in enumerate(cols)]
        b = ColumnBatch(layout, cols)
        want = pa.table({f"c{i}": a for i, a in enumerate(cols)})
        assert b.num_rows == n
        assert b.table().equals(want)
        assert b.ipc() == reference(want)
        assert ipc_table(b.ipc()).equals(want)
        batches.append(b)
    entries = [Entry("insert", k + 1, b) for k, b in enumerate(batches)]
    merged = concat_batches(entries)
    assert isinstance(merged, ColumnBatch)
    assert merged.table().equals(pa.concat_tables([b.table() for b in batches]))
    # a pa.Table among them (a commit read back from the log) gives the same rows through pyarrow
    mixed = concat_batches([Entry("insert", 0, batches[0].table())] + entries[1:])
    assert mixed.equals(merged.table())
    assert Entry("insert", 1, merged).ipc() == reference(merged.table())
