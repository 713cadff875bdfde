"""The logtail format's Arrow IPC streams (schema message made once per schema) are byte for byte
what pyarrow's stream writer writes, for any batch of the column types tables may have."""
import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_profiles import scaled

from logtide.engine.logtail.logtail_format import ipc_bytes, ipc_table

DTYPES = ["int64", "int32", "uint16", "int8", "float64", "float32", "bool"]


def reference(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


@scaled(max_examples=60, deadline=None)
@given(dtypes=st.lists(st.sampled_from(DTYPES), min_size=1, max_size=5),
       chunks=st.lists(st.integers(0, 40), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_ipc_bytes_match_the_stream_writer(dtypes, chunks, seed):
    rng = np.random.default_rng(seed)
    parts = []
    for n in chunks:
        parts.append(pa.table({f"c{i}": (rng.integers(0, 2, n).astype(bool) if d == "bool"
                                         else rng.integers(0, 100, n).astype(d))
                               for i, d in enumerate(dtypes)}))
    t = pa.concat_tables(parts)
    b = ipc_bytes(t)
    assert b == reference(t)
    assert ipc_table(b).equals(t)
