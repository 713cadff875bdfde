cimport numpy as cnp
from libc.stdint cimport int64_t

cdef int check_insert_keys(str table, object pk_ts, object pk_index, list keys, int64_t start_ts) except -1
cdef tuple reserve_encode(object st, object layout, bytes meta, bytes table_json, cnp.ndarray pks, list keys,
                          list user, int64_t ts, int64_t block_rows, object header, bytes magic, int kind)
