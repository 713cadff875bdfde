from libc.stdint cimport int64_t
from cpython.pythread cimport PyThread_type_lock
cimport numpy as cnp

# Node sizes. A leaf holds up to BT_LMAX entries and grows its allocation in steps of
# BT_STEP entries, so a leaf half filled by a split does not pay for the other half.
cdef enum:
    BT_LMAX = 64
    BT_STEP = 16
    BT_IMAX = 64        # children per internal node
    BT_MAXW = 3         # key fields
    BT_MAXD = 48        # tree depth bound (far above what 2^63 entries need)


ctypedef struct BTNode:
    int refs            # owners: the tree, snapshots, iterators, parent copies (atomic)
    int n               # leaf: entries; internal: children
    int cap             # leaf: entry capacity; internal: BT_IMAX + 1
    int leaf
    int64_t* keys       # leaf: n keys; internal: n - 1 separators (child i+1 holds keys >= keys[i])
    int64_t* vals       # leaf only: int64 values or PyObject* bits
    BTNode** kids       # internal only


ctypedef struct Cursor:
    BTNode* nodes[BT_MAXD]
    int idx[BT_MAXD]
    int depth           # index of the leaf level in nodes/idx; -1 when exhausted


ctypedef struct BTTree:
    BTNode* root
    Py_ssize_t count
    int kw              # key width: 1..3 int64 fields
    int objvals         # values are owned PyObject references


cdef class BTree:
    cdef BTTree t
    cdef bint _ro
    cdef int busy
    cdef PyThread_type_lock lock
    cdef object __weakref__

    cdef int _key(self, object key, int64_t* out, bint exact) except -1
    cdef object _key_obj(self, const int64_t* k)
    cdef object _val_obj(self, int64_t v)
    cdef object _at(self, Cursor* c)
    cdef _bulk_impl(self, cnp.ndarray keys, cnp.ndarray vals)
    cdef tuple _span(self, int64_t* plo, int64_t* phi)
    cdef Py_ssize_t _merge_rebuild(self, keys, values) except -1
    cdef int _enter(self) except -1
    cdef int _lock_write(self) except -1
    cdef int _check_write(self) except -1
