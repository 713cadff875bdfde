# cython: language_level=3
"""BTree: an in-memory B+tree with int64 or composite (up to 3 x int64) keys and O(1) snapshots.

Nodes are C structs with their keys and values in one allocation. Nodes are shared between a tree
and its snapshots and counted; a writer copies a shared node before changing it (copy-on-write),
so a snapshot never changes while the tree it came from keeps being written.
"""
import numpy as np
cimport numpy as cnp
cimport cython
from cpython.mem cimport PyMem_RawMalloc, PyMem_RawRealloc, PyMem_RawFree
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.pythread cimport (PyThread_allocate_lock, PyThread_free_lock, PyThread_acquire_lock,
                               PyThread_release_lock, WAIT_LOCK, NOWAIT_LOCK)
from libc.stdint cimport int64_t, uint8_t, INT64_MIN, INT64_MAX
from cpython.long cimport PyLong_Check
from operator import index as _index
from libc.string cimport memcpy, memmove

from logtide.errors import ReadOnlySnapshotError

cnp.import_array()
bt_init_cpu()

# Batches smaller than this run with the GIL held: releasing it costs a thread switch when others
# wait for it (a few µs each way), more than a small batch takes; callers that hold a lock of their
# own (a commit lock) would otherwise hand the GIL to threads that then block on that lock.
cdef Py_ssize_t GIL_BATCH = 64
# insert_many merges and rebuilds when the batch has at least 1/MERGE_RATIO of the tree's entries:
# a rebuild costs a few ns per entry, an insert of a sorted key about 60 ns
cdef Py_ssize_t MERGE_RATIO = 8

cdef extern from *:
    """
    static inline int bt_inc(int *p) { return __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL); }
    static inline int bt_dec(int *p) { return __atomic_sub_fetch(p, 1, __ATOMIC_ACQ_REL); }
    static inline int bt_load(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    /* Searches over one int64 field. Nodes hold at most 64 keys: with AVX2, count the keys below k
       4 at a time; the loads do not depend on each other, so a node whose lines are still arriving
       costs about one memory latency. Without AVX2: a branch-free binary search (cmov, no
       mispredicted jumps). */
    #if defined(__x86_64__) && defined(__GNUC__)
    #include <immintrin.h>
    static int bt_have_avx2 = -1;
    __attribute__((target("avx2"))) static int bt_count_lt_avx2(const int64_t *keys, int n, int64_t k) {
        __m256i kv = _mm256_set1_epi64x(k), acc = _mm256_setzero_si256();
        int i = 0, c;
        for (; i + 4 <= n; i += 4)
            acc = _mm256_sub_epi64(acc, _mm256_cmpgt_epi64(kv, _mm256_loadu_si256((const __m256i *)(keys + i))));
        __m128i s = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        c = (int)(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1));
        for (; i < n; i++) c += keys[i] < k;
        return c;
    }
    __attribute__((target("avx2"))) static int bt_count_le_avx2(const int64_t *keys, int n, int64_t k) {
        __m256i kv = _mm256_set1_epi64x(k), acc = _mm256_setzero_si256();
        int i = 0, c;
        for (; i + 4 <= n; i += 4)   /* counts keys > k */
            acc = _mm256_sub_epi64(acc, _mm256_cmpgt_epi64(_mm256_loadu_si256((const __m256i *)(keys + i)), kv));
        __m128i s = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        c = (int)(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1));
        for (; i < n; i++) c += keys[i] > k;
        return n - c;
    }
    static inline int bt_avx2(void) {
        if (bt_have_avx2 < 0) { __builtin_cpu_init(); bt_have_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0; }
        return bt_have_avx2;
    }
    #define BT_SIMD 1
    #else
    #define BT_SIMD 0
    #endif
    static inline int bt_lb1_bin(const int64_t *keys, int n, int64_t k) {
        const int64_t *base = keys;
        if (n == 0) return 0;
        while (n > 1) {
            int half = n >> 1;
            base += (base[half - 1] < k) * half;
            n -= half;
        }
        return (int)(base - keys) + (base[0] < k);
    }
    static inline int bt_ub1_bin(const int64_t *keys, int n, int64_t k) {
        const int64_t *base = keys;
        if (n == 0) return 0;
        while (n > 1) {
            int half = n >> 1;
            base += (base[half - 1] <= k) * half;
            n -= half;
        }
        return (int)(base - keys) + (base[0] <= k);
    }
    static inline int bt_lb1(const int64_t *keys, int n, int64_t k) {
    #if BT_SIMD
        if (n <= 64 && bt_have_avx2 > 0) return bt_count_lt_avx2(keys, n, k);
    #endif
        return bt_lb1_bin(keys, n, k);
    }
    static inline int bt_ub1(const int64_t *keys, int n, int64_t k) {
    #if BT_SIMD
        if (n <= 64 && bt_have_avx2 > 0) return bt_count_le_avx2(keys, n, k);
    #endif
        return bt_ub1_bin(keys, n, k);
    }
    static void bt_set_simd(int on) {
    #if BT_SIMD
        bt_have_avx2 = -1;
        if (on) bt_avx2(); else bt_have_avx2 = 0;
    #endif
    }
    static int bt_simd_on(void) {
    #if BT_SIMD
        return bt_have_avx2 > 0;
    #else
        return 0;
    #endif
    }
    static void bt_init_cpu(void) {
    #if BT_SIMD
        bt_avx2();
    #endif
    }
    """
    int bt_inc(int *p) nogil
    int bt_dec(int *p) nogil
    int bt_load(int *p) nogil
    int lb1 "bt_lb1"(const int64_t* keys, int n, int64_t k) nogil
    int ub1 "bt_ub1"(const int64_t* keys, int n, int64_t k) nogil
    void bt_init_cpu() nogil
    void bt_set_simd(int on) nogil
    int bt_simd_on() nogil
    void __builtin_prefetch(const void *p) nogil


# ---------------------------------------------------------------- key comparison and search

cdef inline int kcmp(const int64_t* a, const int64_t* b, int kw) noexcept nogil:
    cdef int i
    for i in range(kw):
        if a[i] != b[i]:
            return -1 if a[i] < b[i] else 1
    return 0


@cython.cdivision(True)
cdef inline int lbound(const int64_t* keys, int n, const int64_t* key, int kw) noexcept nogil:
    if kw == 1:
        return lb1(keys, n, key[0])
    cdef int lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if kcmp(keys + mid * kw, key, kw) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cython.cdivision(True)
cdef inline int ubound(const int64_t* keys, int n, const int64_t* key, int kw) noexcept nogil:
    if kw == 1:
        return ub1(keys, n, key[0])
    cdef int lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if kcmp(keys + mid * kw, key, kw) <= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------- nodes

cdef inline size_t leaf_bytes(int cap, int kw) noexcept nogil:
    return sizeof(BTNode) + <size_t>cap * (kw + 1) * 8


cdef inline size_t inner_bytes(int kw) noexcept nogil:
    return sizeof(BTNode) + <size_t>BT_IMAX * kw * 8 + <size_t>(BT_IMAX + 1) * sizeof(void*)


cdef inline void leaf_wire(BTNode* nd, int kw) noexcept nogil:
    nd.keys = <int64_t*>(<char*>nd + sizeof(BTNode))
    nd.vals = nd.keys + <size_t>nd.cap * kw
    nd.kids = NULL


cdef inline void inner_wire(BTNode* nd, int kw) noexcept nogil:
    nd.keys = <int64_t*>(<char*>nd + sizeof(BTNode))
    nd.kids = <BTNode**>(nd.keys + <size_t>BT_IMAX * kw)
    nd.vals = NULL


cdef inline int round_cap(int n) noexcept nogil:
    cdef int c = ((n + BT_STEP - 1) // BT_STEP) * BT_STEP
    if c < BT_STEP:
        c = BT_STEP
    return c if c < BT_LMAX else BT_LMAX


cdef BTNode* leaf_new(int cap, int kw) noexcept nogil:
    cdef BTNode* nd = <BTNode*>PyMem_RawMalloc(leaf_bytes(cap, kw))
    if nd == NULL:
        return NULL
    nd.refs = 1
    nd.n = 0
    nd.cap = cap
    nd.leaf = 1
    leaf_wire(nd, kw)
    return nd


cdef BTNode* inner_new(int kw) noexcept nogil:
    cdef BTNode* nd = <BTNode*>PyMem_RawMalloc(inner_bytes(kw))
    if nd == NULL:
        return NULL
    nd.refs = 1
    nd.n = 0
    nd.cap = BT_IMAX + 1
    nd.leaf = 0
    inner_wire(nd, kw)
    return nd


cdef BTNode* leaf_resize(BTNode* nd, int cap, int kw) noexcept nogil:
    """Change a leaf's capacity (n <= cap); returns the node, which may have moved, or NULL."""
    cdef int old = nd.cap
    cdef int n = nd.n
    cdef BTNode* m
    if cap == old:
        return nd
    if cap < old:  # move the values down before the block shrinks under them
        memmove(nd.keys + <size_t>cap * kw, nd.vals, <size_t>n * 8)
    m = <BTNode*>PyMem_RawRealloc(nd, leaf_bytes(cap, kw))
    if m == NULL:
        if cap < old:  # undo
            memmove(nd.vals, nd.keys + <size_t>cap * kw, <size_t>n * 8)
        return NULL
    m.cap = cap
    leaf_wire(m, kw)
    if cap > old:
        memmove(m.vals, m.keys + <size_t>old * kw, <size_t>n * 8)
    return m


cdef void objs_incref(int64_t* vals, int n) noexcept nogil:
    cdef int i
    with gil:
        for i in range(n):
            Py_INCREF(<object><PyObject*><Py_ssize_t>vals[i])


cdef void objs_decref(int64_t* vals, int n) noexcept nogil:
    cdef int i
    cdef PyObject* o
    with gil:
        for i in range(n):
            o = <PyObject*><Py_ssize_t>vals[i]
            Py_DECREF(<object>o)


cdef void node_decref(BTNode* nd, int objvals) noexcept nogil:
    """Drop one owner; the last owner frees the node and drops its children and values."""
    cdef int i
    if bt_dec(&nd.refs) != 0:
        return
    if nd.leaf:
        if objvals and nd.n:
            objs_decref(nd.vals, nd.n)
    else:
        for i in range(nd.n):
            node_decref(nd.kids[i], objvals)
    PyMem_RawFree(nd)


cdef BTNode* node_clone(BTNode* nd, int kw, int objvals) noexcept nogil:
    cdef size_t size = leaf_bytes(nd.cap, kw) if nd.leaf else inner_bytes(kw)
    cdef BTNode* c = <BTNode*>PyMem_RawMalloc(size)
    cdef int i
    if c == NULL:
        return NULL
    memcpy(c, nd, size)
    c.refs = 1
    if c.leaf:
        leaf_wire(c, kw)
        if objvals and c.n:
            objs_incref(c.vals, c.n)
    else:
        inner_wire(c, kw)
        for i in range(c.n):
            bt_inc(&c.kids[i].refs)
    return c


cdef inline BTNode* own(BTNode** slot, BTTree* t) noexcept nogil:
    """The node at *slot, copied first if anyone else holds it; NULL when out of memory."""
    cdef BTNode* nd = slot[0]
    cdef BTNode* c
    if bt_load(&nd.refs) == 1:
        return nd
    c = node_clone(nd, t.kw, t.objvals)
    if c == NULL:
        return NULL
    slot[0] = c
    node_decref(nd, t.objvals)
    return c


cdef Py_ssize_t node_memory(BTNode* nd, int kw) noexcept nogil:
    cdef Py_ssize_t total
    cdef int i
    if nd == NULL:
        return 0
    if nd.leaf:
        return leaf_bytes(nd.cap, kw)
    total = inner_bytes(kw)
    for i in range(nd.n):
        total += node_memory(nd.kids[i], kw)
    return total


# ---------------------------------------------------------------- insert / delete / find

cdef inline void pf_node(const BTNode* nd, int kw) noexcept nogil:
    """Ask for a whole node at once (keys, then values or children): the lines arrive in parallel."""
    cdef const char* p = <const char*>nd
    cdef int i, lines = <int>((sizeof(BTNode) + BT_LMAX * (kw + 1) * 8 + 63) // 64)
    if lines > 32:
        lines = 32
    for i in range(lines):
        __builtin_prefetch(p + i * 64)

cdef inline void leaf_put(BTNode* nd, int j, const int64_t* key, int64_t val, int kw) noexcept nogil:
    cdef int n = nd.n
    if j < n:
        memmove(nd.keys + (j + 1) * kw, nd.keys + j * kw, <size_t>(n - j) * kw * 8)
        memmove(nd.vals + j + 1, nd.vals + j, <size_t>(n - j) * 8)
    memcpy(nd.keys + j * kw, key, kw * 8)
    nd.vals[j] = val
    nd.n = n + 1


cdef inline void inner_put(BTNode* p, int i, const int64_t* sep, BTNode* right, int kw) noexcept nogil:
    """Insert `right` as child i+1 with separator `sep` at keys[i]."""
    cdef int n = p.n
    if i + 1 < n:
        memmove(p.keys + (i + 1) * kw, p.keys + i * kw, <size_t>(n - 1 - i) * kw * 8)
        memmove(p.kids + i + 2, p.kids + i + 1, <size_t>(n - 1 - i) * sizeof(void*))
    memcpy(p.keys + i * kw, sep, kw * 8)
    p.kids[i + 1] = right
    p.n = n + 1


cdef int tree_insert(BTTree* t, const int64_t* key, int64_t val, int64_t* old) noexcept nogil:
    """Insert or replace. Returns 1 when new, 0 when replaced (old value in *old), -1 when out of memory.

    For object values the tree takes over the caller's reference to `val`; a replaced value's
    reference is handed back in *old for the caller to drop.
    """
    cdef BTNode* pn[BT_MAXD]
    cdef int pi[BT_MAXD]
    cdef int64_t sepbuf[BT_MAXW]
    cdef int d = 0, i = 0, j, mid, rn, kw = t.kw
    cdef BTNode** slot = &t.root
    cdef BTNode* nd
    cdef BTNode* r
    cdef BTNode* p
    cdef BTNode* q
    cdef bint rightmost = True
    if t.root == NULL:
        t.root = leaf_new(BT_STEP, kw)
        if t.root == NULL:
            return -1
    nd = own(slot, t)
    if nd == NULL:
        return -1
    while not nd.leaf:
        i = ubound(nd.keys, nd.n - 1, key, kw)
        if i != nd.n - 1:
            rightmost = False
        pn[d] = nd
        pi[d] = i
        d += 1
        slot = &nd.kids[i]
        pf_node(slot[0], kw)
        nd = own(slot, t)
        if nd == NULL:
            return -1
    j = lbound(nd.keys, nd.n, key, kw)
    if j < nd.n and kcmp(nd.keys + j * kw, key, kw) == 0:
        old[0] = nd.vals[j]
        nd.vals[j] = val
        return 0
    if nd.n < BT_LMAX:
        if nd.n == nd.cap:
            nd = leaf_resize(nd, round_cap(nd.cap + BT_STEP), kw)
            if nd == NULL:
                return -1
            slot[0] = nd
        leaf_put(nd, j, key, val, kw)
        t.count += 1
        return 1
    # a full leaf splits; appends at the right edge leave the left leaf full (sequential loads)
    if rightmost and j == nd.n:
        r = leaf_new(BT_STEP, kw)
        if r == NULL:
            return -1
        leaf_put(r, 0, key, val, kw)
    else:
        mid = BT_LMAX // 2
        rn = nd.n - mid
        r = leaf_new(round_cap(rn + 1), kw)
        if r == NULL:
            return -1
        memcpy(r.keys, nd.keys + mid * kw, <size_t>rn * kw * 8)
        memcpy(r.vals, nd.vals + mid, <size_t>rn * 8)
        r.n = rn
        nd.n = mid
        if j <= mid:
            leaf_put(nd, j, key, val, kw)
        else:
            leaf_put(r, j - mid, key, val, kw)
        q = leaf_resize(nd, round_cap(nd.n + 1), kw)
        if q != NULL:
            nd = q
            slot[0] = nd
    t.count += 1
    memcpy(sepbuf, r.keys, kw * 8)
    # hand the new right node and its separator up the path, splitting full parents
    while True:
        if d == 0:
            q = inner_new(kw)
            if q == NULL:
                return -1
            q.kids[0] = t.root
            q.kids[1] = r
            memcpy(q.keys, sepbuf, kw * 8)
            q.n = 2
            t.root = q
            return 1
        d -= 1
        p = pn[d]
        i = pi[d]
        inner_put(p, i, sepbuf, r, kw)
        if p.n <= BT_IMAX:
            return 1
        q = inner_new(kw)
        if q == NULL:
            return -1
        mid = p.n - 1 if (rightmost and i == p.n - 2) else p.n // 2
        memcpy(sepbuf, p.keys + (mid - 1) * kw, kw * 8)
        rn = p.n - mid
        memcpy(q.kids, p.kids + mid, <size_t>rn * sizeof(void*))
        memcpy(q.keys, p.keys + mid * kw, <size_t>(rn - 1) * kw * 8)
        q.n = rn
        p.n = mid
        r = q


cdef BTNode* find_leaf(BTNode* nd, const int64_t* key, int kw) noexcept nogil:
    while not nd.leaf:
        nd = nd.kids[ubound(nd.keys, nd.n - 1, key, kw)]
        pf_node(nd, kw)
    return nd


cdef enum:
    GET_GROUP = 16      # lookups walked down together by get_many


cdef inline void pf_keys(const BTNode* nd, int kw) noexcept nogil:
    """Prefetch the lines of a node's keys that a search reads (not its values or children)."""
    cdef const char* p = <const char*>nd.keys
    cdef int i, lines = <int>((<size_t>nd.n * kw * 8 + 63) // 64)
    __builtin_prefetch(<const char*>nd)
    for i in range(lines):
        __builtin_prefetch(p + i * 64)


cdef inline bint leaf_get(const BTNode* nd, const int64_t* key, int kw, int64_t* val) noexcept nogil:
    """The value of key in this leaf, if it holds the key."""
    cdef int j = lbound(nd.keys, nd.n, key, kw)
    if j < nd.n and kcmp(nd.keys + j * kw, key, kw) == 0:
        val[0] = nd.vals[j]
        return True
    return False


cdef void tree_get_group(BTNode* root, const int64_t* keys, Py_ssize_t g, int kw, int64_t* vals,
                         uint8_t* found, int64_t dflt) noexcept nogil:
    """tree_get of g <= GET_GROUP keys walked down in lockstep: each level's node fetches for the
    whole group are in flight together, instead of one cache miss after another."""
    cdef BTNode* nds[GET_GROUP]
    cdef Py_ssize_t i
    cdef bint down = True
    for i in range(g):
        nds[i] = root
    while down:
        down = False
        for i in range(g):
            if not nds[i].leaf:
                nds[i] = nds[i].kids[ubound(nds[i].keys, nds[i].n - 1, keys + i * kw, kw)]
                pf_keys(nds[i], kw)
                down = True
    for i in range(g):
        if leaf_get(nds[i], keys + i * kw, kw, vals + i):
            found[i] = 1
        else:
            vals[i] = dflt


cdef inline bint tree_get(BTNode* root, const int64_t* key, int kw, int64_t* val) noexcept nogil:
    if root == NULL:
        return False
    return leaf_get(find_leaf(root, key, kw), key, kw, val)


cdef void inner_remove(BTNode* p, int i, int kw) noexcept nogil:
    """Remove child i and the separator beside it."""
    cdef int n = p.n
    cdef int s = i - 1 if i > 0 else 0
    if n > 1:
        memmove(p.keys + s * kw, p.keys + (s + 1) * kw, <size_t>(n - 2 - s) * kw * 8)
    memmove(p.kids + i, p.kids + i + 1, <size_t>(n - 1 - i) * sizeof(void*))
    p.n = n - 1


cdef int tree_delete(BTTree* t, const int64_t* key, int64_t* old) noexcept nogil:
    """Remove key. Returns 1 when removed (value in *old), 0 when absent, -1 when out of memory."""
    cdef BTNode* pn[BT_MAXD]
    cdef int pi[BT_MAXD]
    cdef int d = 0, k, j, i, kw = t.kw
    cdef BTNode* nd = t.root
    cdef BTNode** slot
    cdef BTNode* p
    cdef BTNode* a
    cdef BTNode* b
    cdef BTNode* m
    if nd == NULL:
        return 0
    # find it without copying anything, then copy the path only when it is there
    while not nd.leaf:
        i = ubound(nd.keys, nd.n - 1, key, kw)
        pi[d] = i
        d += 1
        nd = nd.kids[i]
    j = lbound(nd.keys, nd.n, key, kw)
    if j >= nd.n or kcmp(nd.keys + j * kw, key, kw) != 0:
        return 0
    slot = &t.root
    nd = own(slot, t)
    if nd == NULL:
        return -1
    for k in range(d):
        pn[k] = nd
        slot = &nd.kids[pi[k]]
        nd = own(slot, t)
        if nd == NULL:
            return -1
    old[0] = nd.vals[j]
    memmove(nd.keys + j * kw, nd.keys + (j + 1) * kw, <size_t>(nd.n - 1 - j) * kw * 8)
    memmove(nd.vals + j, nd.vals + j + 1, <size_t>(nd.n - 1 - j) * 8)
    nd.n -= 1
    t.count -= 1
    if nd.n == 0:
        PyMem_RawFree(nd)
        k = d - 1
        while k >= 0:
            p = pn[k]
            inner_remove(p, pi[k], kw)
            if p.n > 0:
                break
            PyMem_RawFree(p)
            k -= 1
        if k < 0:
            t.root = NULL
    elif d > 0 and nd.n < BT_LMAX // 4:
        # merge a thin leaf with a sibling when both fit in three quarters of a leaf
        p = pn[d - 1]
        i = pi[d - 1]
        a = NULL
        if i + 1 < p.n and p.kids[i + 1].n + nd.n <= BT_LMAX * 3 // 4:
            b = own(&p.kids[i + 1], t)
            if b != NULL:
                a = nd
        elif i > 0 and p.kids[i - 1].n + nd.n <= BT_LMAX * 3 // 4:
            a = own(&p.kids[i - 1], t)
            if a != NULL:
                b = nd
                i -= 1
        if a != NULL:
            if a.cap < a.n + b.n:
                m = leaf_resize(a, round_cap(a.n + b.n), kw)
                if m == NULL:
                    return 1
                a = m
                p.kids[i] = a
            memcpy(a.keys + a.n * kw, b.keys, <size_t>b.n * kw * 8)
            memcpy(a.vals + a.n, b.vals, <size_t>b.n * 8)
            a.n += b.n
            PyMem_RawFree(b)   # its values moved to a, so no reference changes hands
            inner_remove(p, i + 1, kw)
    elif nd.cap - nd.n >= 2 * BT_STEP:
        m = leaf_resize(nd, round_cap(nd.n + 1), kw)
        if m != NULL:
            slot[0] = m
    # a root with one child hands the tree to that child
    while t.root != NULL and not t.root.leaf and t.root.n == 1:
        p = t.root
        t.root = p.kids[0]
        bt_inc(&t.root.refs)    # the tree takes the child over; p may be shared with a snapshot
        node_decref(p, t.objvals)
    return 1


cdef BTNode* tree_bulk(const int64_t* keys, const int64_t* vals, Py_ssize_t n, int kw) noexcept nogil:
    """Build a tree of full leaves from strictly increasing keys; NULL when n == 0 or out of memory."""
    cdef Py_ssize_t nleaves, i, lo, m, level_n, nparents, c, k
    cdef BTNode** level
    cdef BTNode** up
    cdef int64_t* firsts
    cdef int64_t* upfirsts
    cdef BTNode* nd
    cdef int take, kk
    if n == 0:
        return NULL
    nleaves = (n + BT_LMAX - 1) // BT_LMAX
    level = <BTNode**>PyMem_RawMalloc(nleaves * sizeof(void*))
    firsts = <int64_t*>PyMem_RawMalloc(nleaves * kw * 8)
    if level == NULL or firsts == NULL:
        PyMem_RawFree(level)
        PyMem_RawFree(firsts)
        return NULL
    for i in range(nleaves):
        lo = i * BT_LMAX
        take = <int>(n - lo if n - lo < BT_LMAX else BT_LMAX)
        nd = leaf_new(round_cap(take), kw)
        if nd == NULL:
            for k in range(i):
                node_decref(level[k], 0)
            PyMem_RawFree(level)
            PyMem_RawFree(firsts)
            return NULL
        memcpy(nd.keys, keys + lo * kw, <size_t>take * kw * 8)
        memcpy(nd.vals, vals + lo, <size_t>take * 8)
        nd.n = take
        level[i] = nd
        memcpy(firsts + i * kw, keys + lo * kw, kw * 8)
    level_n = nleaves
    while level_n > 1:
        nparents = (level_n + BT_IMAX - 1) // BT_IMAX
        up = <BTNode**>PyMem_RawMalloc(nparents * sizeof(void*))
        upfirsts = <int64_t*>PyMem_RawMalloc(nparents * kw * 8)
        if up == NULL or upfirsts == NULL:
            for k in range(level_n):
                node_decref(level[k], 0)
            PyMem_RawFree(level)
            PyMem_RawFree(firsts)
            PyMem_RawFree(up)
            PyMem_RawFree(upfirsts)
            return NULL
        for i in range(nparents):
            lo = i * BT_IMAX
            c = level_n - lo if level_n - lo < BT_IMAX else BT_IMAX
            nd = inner_new(kw)
            # (an allocation failure here leaks only on an already failing machine; keep going)
            if nd == NULL:
                PyMem_RawFree(up)
                PyMem_RawFree(upfirsts)
                PyMem_RawFree(level)
                PyMem_RawFree(firsts)
                return NULL
            memcpy(nd.kids, level + lo, <size_t>c * sizeof(void*))
            if c > 1:
                memcpy(nd.keys, firsts + (lo + 1) * kw, <size_t>(c - 1) * kw * 8)
            nd.n = <int>c
            up[i] = nd
            memcpy(upfirsts + i * kw, firsts + lo * kw, kw * 8)
        PyMem_RawFree(level)
        PyMem_RawFree(firsts)
        level = up
        firsts = upfirsts
        level_n = nparents
    nd = level[0]
    PyMem_RawFree(level)
    PyMem_RawFree(firsts)
    return nd


# ---------------------------------------------------------------- cursors

cdef inline void cur_descend_first(Cursor* c, BTNode* nd) noexcept nogil:
    """Extend the cursor from node nd down to its first entry."""
    while True:
        c.depth += 1
        c.nodes[c.depth] = nd
        c.idx[c.depth] = 0
        if nd.leaf:
            return
        nd = nd.kids[0]


cdef inline void cur_descend_last(Cursor* c, BTNode* nd) noexcept nogil:
    while True:
        c.depth += 1
        c.nodes[c.depth] = nd
        c.idx[c.depth] = nd.n - 1
        if nd.leaf:
            return
        nd = nd.kids[nd.n - 1]


cdef void cur_next_leaf(Cursor* c) noexcept nogil:
    """Move to the first entry of the next leaf (depth -1 at the end)."""
    cdef int d = c.depth - 1
    while d >= 0:
        if c.idx[d] + 1 < c.nodes[d].n:
            c.idx[d] += 1
            c.depth = d
            cur_descend_first(c, c.nodes[d].kids[c.idx[d]])
            if c.nodes[c.depth].n > 0:
                return
            d = c.depth - 1
            continue
        d -= 1
    c.depth = -1


cdef void cur_prev_leaf(Cursor* c) noexcept nogil:
    cdef int d = c.depth - 1
    while d >= 0:
        if c.idx[d] > 0:
            c.idx[d] -= 1
            c.depth = d
            cur_descend_last(c, c.nodes[d].kids[c.idx[d]])
            if c.nodes[c.depth].n > 0:
                return
            d = c.depth - 1
            continue
        d -= 1
    c.depth = -1


cdef void cur_seek_ge(Cursor* c, BTNode* root, const int64_t* key, int kw) noexcept nogil:
    """Position at the first entry >= key (key NULL: the first entry)."""
    cdef BTNode* nd = root
    cdef int i
    c.depth = -1
    if nd == NULL:
        return
    while True:
        c.depth += 1
        c.nodes[c.depth] = nd
        if nd.leaf:
            c.idx[c.depth] = 0 if key == NULL else lbound(nd.keys, nd.n, key, kw)
            break
        i = 0 if key == NULL else ubound(nd.keys, nd.n - 1, key, kw)
        c.idx[c.depth] = i
        nd = nd.kids[i]
    if c.idx[c.depth] >= nd.n:
        cur_next_leaf(c)


cdef void cur_seek_le(Cursor* c, BTNode* root, const int64_t* key, int kw, bint strict) noexcept nogil:
    """Position at the last entry <= key (< key when strict)."""
    cdef BTNode* nd = root
    cdef int i
    c.depth = -1
    if nd == NULL:
        return
    while True:
        c.depth += 1
        c.nodes[c.depth] = nd
        if nd.leaf:
            c.idx[c.depth] = (lbound(nd.keys, nd.n, key, kw) if strict else ubound(nd.keys, nd.n, key, kw)) - 1
            break
        i = lbound(nd.keys, nd.n - 1, key, kw) if strict else ubound(nd.keys, nd.n - 1, key, kw)
        c.idx[c.depth] = i
        nd = nd.kids[i]
    if c.idx[c.depth] < 0:
        cur_prev_leaf(c)


cdef Py_ssize_t cur_span(Cursor* c, const int64_t* hi, int kw, int64_t* keys_out, int64_t* vals_out) noexcept nogil:
    """Walk from the cursor to hi (exclusive, NULL: the end), copying when the outputs are given."""
    cdef Py_ssize_t total = 0
    cdef BTNode* nd
    cdef int start, stop
    while c.depth >= 0:
        nd = c.nodes[c.depth]
        start = c.idx[c.depth]
        stop = nd.n
        if hi != NULL and kcmp(nd.keys + (nd.n - 1) * kw, hi, kw) >= 0:
            stop = lbound(nd.keys, nd.n, hi, kw)
        if stop > start:
            if keys_out != NULL:
                memcpy(keys_out + total * kw, nd.keys + start * kw, <size_t>(stop - start) * kw * 8)
                memcpy(vals_out + total, nd.vals + start, <size_t>(stop - start) * 8)
            total += stop - start
        if stop < nd.n:
            c.depth = -1
            break
        cur_next_leaf(c)
    return total


# ---------------------------------------------------------------- the Python class

def _simd(on=None) -> bool:
    """Whether single-field searches use the AVX2 scan; _simd(False) forces the binary search (tests)."""
    if on is not None:
        bt_set_simd(1 if on else 0)
    return bool(bt_simd_on())


cdef inline int64_t _i64(object x) except? -1:
    """A key field or an int64 value: __index__, never __int__, so 1.7 or "30" is a TypeError, not
    another key; OverflowError outside int64."""
    if not PyLong_Check(x):
        x = _index(x)
    return x


def _int64_array(x, what: str):
    """A batch of keys or values as int64, refusing what would change: floats, strings, NaN and
    unsigned values past int64 (which a cast would wrap)."""
    a = np.asarray(x)
    kind = a.dtype.kind
    if kind == "u" and a.size and a.max() > INT64_MAX:
        raise OverflowError(f"{what} are int64, got {int(a.max())}")
    if kind in "iub" or a.size == 0:
        return np.ascontiguousarray(a, dtype=np.int64)
    if kind == "O" and all(isinstance(v, int) for v in a.flat):
        raise OverflowError(f"{what} are int64, got an integer outside it")
    raise TypeError(f"{what} are integers, got {a.dtype}")


def _strictly_increasing(keys) -> bool:
    if len(keys) < 2:
        return True
    if keys.ndim == 1:
        return bool((keys[1:] > keys[:-1]).all())
    a, b = keys[:-1], keys[1:]
    res = np.zeros(len(a), dtype=bool)          # row i+1 > row i, decided by the first field that differs
    for c in range(keys.shape[1] - 1, -1, -1):
        res = (b[:, c] > a[:, c]) | ((b[:, c] == a[:, c]) & res)
    return bool(res.all())


def _sorted_unique_last(keys, values):
    """Stable-sort the batch and keep the last value of each repeated key."""
    if _strictly_increasing(keys):      # already in order (appends, row ids): nothing to do
        return keys, values
    if keys.ndim == 1:
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        keep = np.ones(len(k), dtype=bool)
        keep[:-1] = k[1:] != k[:-1]
    else:
        order = np.lexsort(keys.T[::-1])
        k = keys[order]
        keep = np.ones(len(k), dtype=bool)
        keep[:-1] = (k[1:] != k[:-1]).any(axis=1)
    return np.ascontiguousarray(k[keep]), values[order][keep]


cdef inline int _store(BTTree* t, const int64_t* k, object value) except -1:
    """tree_insert of a Python value: an object tree holds a reference to each value it stores."""
    cdef int64_t v, old = 0
    cdef int r
    if t.objvals:
        Py_INCREF(value)
        v = <int64_t><Py_ssize_t><PyObject*>value
    else:
        v = _i64(value)
    r = tree_insert(t, k, v, &old)
    if r < 0:
        if t.objvals:
            Py_DECREF(value)
        raise MemoryError()
    if r == 0 and t.objvals:
        Py_DECREF(<object><PyObject*><Py_ssize_t>old)
    return r


cdef class BTree:
    """An ordered map from int64 keys (or tuples of up to 3 int64, compared in order) to values.

    BTree(width=1, values="int64"): values are "int64" or "object" (any Python object).
    snapshot() returns a read-only view in O(1) that later writes to this tree never change.
    Ranges are half-open [lo, hi); a bound given as a shorter tuple is padded with the minimum int64.
    """

    def __cinit__(self, object width=1, str values="int64"):
        if PyLong_Check(width) and not 1 <= width <= BT_MAXW:
            raise ValueError(f"BTree key width must be 1..{BT_MAXW}, got {width}")
        if values not in ("int64", "object"):
            raise ValueError(f"BTree values must be 'int64' or 'object', got {values!r}")
        if not PyLong_Check(width) or isinstance(width, bool):
            raise TypeError(f"BTree key width must be an int, got {width!r}")
        self.t.root = NULL
        self.t.count = 0
        self.t.kw = width
        self.t.objvals = values == "object"
        self._ro = False
        self.busy = 0
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.t.root != NULL:
            node_decref(self.t.root, self.t.objvals)
            self.t.root = NULL
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    @property
    def width(self) -> int:
        return self.t.kw

    @property
    def values(self) -> str:
        return "object" if self.t.objvals else "int64"

    @property
    def readonly(self) -> bool:
        return self._ro

    # -- helpers

    cdef int _enter(self) except -1:
        """Wait out a batch write running without the GIL in another thread."""
        if self.busy:
            with nogil:
                PyThread_acquire_lock(self.lock, WAIT_LOCK)
            PyThread_release_lock(self.lock)
        return 0

    cdef int _lock_write(self) except -1:
        """Take the write lock: at once when it is free, else waiting without the GIL (the holder
        may be a batch writer that needs the GIL to finish)."""
        if not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self.lock, WAIT_LOCK)
        return 0

    cdef int _check_write(self) except -1:
        if self._ro:
            raise ReadOnlySnapshotError("this BTree is a read-only snapshot")
        self._enter()
        return 0

    cdef int _key(self, object key, int64_t* out, bint exact) except -1:
        cdef int kw = self.t.kw, i, n
        if kw == 1 and not isinstance(key, tuple):
            out[0] = _i64(key)
            return 0
        if not isinstance(key, tuple):
            raise TypeError(f"a key of this BTree is a tuple of {kw} ints, got {type(key).__name__}")
        n = len(key)
        if n > kw or (exact and n != kw) or n == 0:
            raise TypeError(f"a key of this BTree has {kw} fields, got {n}")
        for i in range(n):
            out[i] = _i64(key[i])
        for i in range(n, kw):
            out[i] = INT64_MIN
        return 0

    cdef object _key_obj(self, const int64_t* k):
        if self.t.kw == 1:
            return k[0]
        if self.t.kw == 2:
            return (k[0], k[1])
        return (k[0], k[1], k[2])

    cdef object _val_obj(self, int64_t v):
        if self.t.objvals:
            return <object><PyObject*><Py_ssize_t>v
        return v

    def _keys_array(self, keys):
        a = _int64_array(keys, "BTree keys")
        if self.t.kw == 1:
            if a.ndim == 2 and a.shape[1] == 1:
                a = a.reshape(-1)
            if a.ndim != 1:
                raise TypeError(f"keys of a width-1 BTree are a 1-d int64 array, got shape {a.shape}")
        elif a.ndim != 2 or a.shape[1] != self.t.kw:
            raise TypeError(f"keys of a width-{self.t.kw} BTree are an (n, {self.t.kw}) int64 array, got shape {a.shape}")
        return a

    # -- per call

    def __len__(self):
        return self.t.count

    def __bool__(self):
        return self.t.count > 0

    def insert(self, key, value) -> bool:
        """Set key to value; True when the key is new."""
        cdef int64_t k[BT_MAXW]
        self._check_write()
        self._key(key, k, True)
        return _store(&self.t, k, value) == 1

    def __setitem__(self, key, value):
        cdef int64_t k[BT_MAXW]
        if self._ro or self.busy:
            self._check_write()
        if self.t.kw == 1 and not isinstance(key, tuple):
            k[0] = _i64(key)
        else:
            self._key(key, k, True)
        _store(&self.t, k, value)

    def get(self, key, default=None):
        """The value of key, or default."""
        cdef int64_t k[BT_MAXW]
        cdef int64_t v
        if self.busy:
            self._enter()
        if self.t.kw == 1 and not isinstance(key, tuple):
            k[0] = _i64(key)
        else:
            self._key(key, k, True)
        if tree_get(self.t.root, k, self.t.kw, &v):
            if self.t.objvals:
                return <object><PyObject*><Py_ssize_t>v
            return v
        return default

    def __getitem__(self, key):
        cdef int64_t k[BT_MAXW]
        cdef int64_t v
        if self.busy:
            self._enter()
        if self.t.kw == 1 and not isinstance(key, tuple):
            k[0] = _i64(key)
        else:
            self._key(key, k, True)
        if tree_get(self.t.root, k, self.t.kw, &v):
            if self.t.objvals:
                return <object><PyObject*><Py_ssize_t>v
            return v
        raise KeyError(key)

    def __contains__(self, key):
        cdef int64_t k[BT_MAXW]
        cdef int64_t v
        self._enter()
        self._key(key, k, True)
        return tree_get(self.t.root, k, self.t.kw, &v)

    def delete(self, key) -> bool:
        """Remove key; True when it was there."""
        cdef int64_t k[BT_MAXW]
        cdef int64_t old = 0
        cdef int r
        self._check_write()
        self._key(key, k, True)
        r = tree_delete(&self.t, k, &old)
        if r < 0:
            raise MemoryError()
        if r == 1 and self.t.objvals:
            Py_DECREF(<object><PyObject*><Py_ssize_t>old)
        return r == 1

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    def pop(self, key, default=None):
        """Remove key and return its value, or default when absent."""
        cdef int64_t k[BT_MAXW]
        cdef int64_t old = 0
        cdef int r
        self._check_write()
        self._key(key, k, True)
        r = tree_delete(&self.t, k, &old)
        if r < 0:
            raise MemoryError()
        if r == 0:
            return default
        if self.t.objvals:
            out = <object><PyObject*><Py_ssize_t>old
            Py_DECREF(out)   # drop the tree's reference; `out` keeps its own
            return out
        return old

    def floor(self, key):
        """(key, value) of the greatest key <= key, or None."""
        cdef int64_t k[BT_MAXW]
        cdef Cursor c
        self._enter()
        self._key(key, k, False)
        cur_seek_le(&c, self.t.root, k, self.t.kw, False)
        if c.depth < 0:
            return None
        return self._at(&c)

    def ceiling(self, key):
        """(key, value) of the least key >= key, or None."""
        cdef int64_t k[BT_MAXW]
        cdef Cursor c
        self._enter()
        self._key(key, k, False)
        cur_seek_ge(&c, self.t.root, k, self.t.kw)
        if c.depth < 0:
            return None
        return self._at(&c)

    def lower(self, key):
        """(key, value) of the greatest key < key, or None."""
        cdef int64_t k[BT_MAXW]
        cdef Cursor c
        self._enter()
        self._key(key, k, False)
        cur_seek_le(&c, self.t.root, k, self.t.kw, True)
        if c.depth < 0:
            return None
        return self._at(&c)

    cdef object _at(self, Cursor* c):
        cdef BTNode* nd = c.nodes[c.depth]
        cdef int j = c.idx[c.depth]
        return (self._key_obj(nd.keys + j * self.t.kw), self._val_obj(nd.vals[j]))

    def first(self):
        """(key, value) of the least key, or None."""
        cdef Cursor c
        self._enter()
        cur_seek_ge(&c, self.t.root, NULL, self.t.kw)
        return None if c.depth < 0 else self._at(&c)

    def last(self):
        """(key, value) of the greatest key, or None."""
        cdef Cursor c
        self._enter()
        c.depth = -1
        if self.t.root != NULL:
            cur_descend_last(&c, self.t.root)
            if c.idx[c.depth] < 0:
                cur_prev_leaf(&c)
        return None if c.depth < 0 else self._at(&c)

    def range(self, lo=None, hi=None):
        """Iterate (key, value) for lo <= key < hi in key order, over a snapshot taken now."""
        self._enter()
        it = BTreeRange.__new__(BTreeRange)
        (<BTreeRange>it).start(self, lo, hi)
        return it

    def items(self):
        return self.range()

    def keys(self):
        return (k for k, _ in self.range())

    def values_iter(self):
        return (v for _, v in self.range())

    def __iter__(self):
        return self.keys()

    def range_to_numpy(self, lo=None, hi=None):
        """(keys, values) arrays of the entries with lo <= key < hi, in key order.

        keys: int64, shape (n,) for width 1 and (n, width) otherwise; values: int64 or object.
        """
        cdef int64_t klo[BT_MAXW]
        cdef int64_t khi[BT_MAXW]
        cdef int64_t* plo = NULL
        cdef int64_t* phi = NULL
        self._enter()
        if lo is not None:
            self._key(lo, klo, False)
            plo = klo
        if hi is not None:
            self._key(hi, khi, False)
            phi = khi
        return self._span(plo, phi)

    cdef tuple _span(self, int64_t* plo, int64_t* phi):
        """range_to_numpy without the wait for a batch writer (which may be the caller)."""
        cdef Cursor c
        cdef Py_ssize_t n, i
        cdef int kw = self.t.kw
        cdef BTNode* root = self.t.root
        with nogil:
            cur_seek_ge(&c, root, plo, kw)
            n = cur_span(&c, phi, kw, NULL, NULL)
        if kw == 1:
            keys = np.empty(n, dtype=np.int64)
        else:
            keys = np.empty((n, kw), dtype=np.int64)
        vals = np.empty(n, dtype=np.int64)
        cdef int64_t* kp = <int64_t*>cnp.PyArray_DATA(keys)
        cdef int64_t* vp = <int64_t*>cnp.PyArray_DATA(vals)
        if n:
            with nogil:
                cur_seek_ge(&c, root, plo, kw)
                cur_span(&c, phi, kw, kp, vp)
        if self.t.objvals:
            out = np.empty(n, dtype=object)
            for i in range(n):
                out[i] = <object><PyObject*><Py_ssize_t>vp[i]
            return keys, out
        return keys, vals

    def count_range(self, lo=None, hi=None) -> int:
        """How many keys lie in [lo, hi)."""
        cdef int64_t klo[BT_MAXW]
        cdef int64_t khi[BT_MAXW]
        cdef int64_t* plo = NULL
        cdef int64_t* phi = NULL
        cdef Cursor c
        cdef Py_ssize_t n
        self._enter()
        if lo is not None:
            self._key(lo, klo, False)
            plo = klo
        if hi is not None:
            self._key(hi, khi, False)
            phi = khi
        cur_seek_ge(&c, self.t.root, plo, self.t.kw)
        n = cur_span(&c, phi, self.t.kw, NULL, NULL)
        return n

    # -- batches

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def insert_many(self, keys, values, bint assume_sorted=False) -> int:
        """Insert a batch (numpy keys and values); a key repeated in the batch takes its last value.

        Returns how many keys were new. An empty tree is bulk-loaded; an int64 tree whose batch has at
        least an eighth as many keys as it holds is rebuilt from the merge of both.
        """
        cdef Py_ssize_t n, i
        cdef int r, kw = self.t.kw
        cdef int64_t old = 0
        cdef Py_ssize_t added = 0
        cdef int64_t* kp
        cdef int64_t* vp
        self._check_write()
        keys = self._keys_array(keys)
        n = keys.shape[0]
        if self.t.objvals:
            values = np.asarray(values, dtype=object)
        else:
            values = _int64_array(values, "the values of an int64 BTree")
        if values.ndim != 1 or values.shape[0] != n:
            raise ValueError(f"insert_many needs one value per key: {n} keys, values of shape {values.shape}")
        if n == 0:
            return 0
        # a bulk load needs sorted keys: an unsorted batch given as sorted is sorted here all the same
        if not assume_sorted or (self.t.root == NULL and not _strictly_increasing(keys)):
            keys, values = _sorted_unique_last(keys, values)
            n = keys.shape[0]
        if self.t.root == NULL:
            self._bulk(keys, values)
            return n
        if not self.t.objvals and n * MERGE_RATIO >= self.t.count:
            return self._merge_rebuild(keys, values)
        kp = <int64_t*>cnp.PyArray_DATA(keys)
        if self.t.objvals:
            for i in range(n):
                v = values[i]
                Py_INCREF(v)
                r = tree_insert(&self.t, kp + i * kw, <int64_t><Py_ssize_t><PyObject*>v, &old)
                if r < 0:
                    Py_DECREF(v)
                    raise MemoryError()
                if r == 0:
                    Py_DECREF(<object><PyObject*><Py_ssize_t>old)
                else:
                    added += 1
            return added
        values = np.ascontiguousarray(values, dtype=np.int64)
        vp = <int64_t*>cnp.PyArray_DATA(values)
        r = 0
        self._lock_write()
        self.busy = 1
        try:
            if n < GIL_BATCH:
                for i in range(n):
                    r = tree_insert(&self.t, kp + i * kw, vp[i], &old)
                    if r < 0:
                        break
                    added += r
            else:
                with nogil:
                    for i in range(n):
                        r = tree_insert(&self.t, kp + i * kw, vp[i], &old)
                        if r < 0:
                            break
                        added += r
        finally:
            self.busy = 0
            PyThread_release_lock(self.lock)
        if r < 0:
            raise MemoryError()
        return added

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def get_many(self, keys, default=0):
        """(values, found) for a batch of keys; missing keys get default (int64 trees) or None."""
        cdef Py_ssize_t n, i, g
        cdef int kw = self.t.kw
        cdef int64_t* kp
        cdef int64_t* vp
        cdef cnp.uint8_t* fp
        cdef BTNode* root
        cdef int64_t dflt = 0
        self._enter()
        keys = self._keys_array(keys)
        n = keys.shape[0]
        vals = np.empty(n, dtype=np.int64)
        found = np.zeros(n, dtype=np.bool_)
        kp = <int64_t*>cnp.PyArray_DATA(keys)
        vp = <int64_t*>cnp.PyArray_DATA(vals)
        fp = <cnp.uint8_t*>cnp.PyArray_DATA(found)
        if not self.t.objvals and default is not None:
            dflt = _i64(default)
        root = self.t.root
        if n < GIL_BATCH:
            for i in range(n):
                if tree_get(root, kp + i * kw, kw, vp + i):
                    fp[i] = 1
                else:
                    vp[i] = dflt
        else:
            with nogil:
                if root == NULL:
                    for i in range(n):
                        vp[i] = dflt
                else:
                    i = 0
                    while i < n:
                        g = n - i if n - i < GET_GROUP else GET_GROUP
                        tree_get_group(root, kp + i * kw, g, kw, vp + i, fp + i, dflt)
                        i += g
        if self.t.objvals:
            out = np.empty(n, dtype=object)
            for i in range(n):
                out[i] = <object><PyObject*><Py_ssize_t>vp[i] if fp[i] else default
            return out, found
        return vals, found

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def delete_many(self, keys) -> int:
        """Remove a batch of keys; returns how many were there."""
        cdef Py_ssize_t n, i, removed = 0
        cdef int kw = self.t.kw, r = 0
        cdef int64_t old = 0
        cdef int64_t* kp
        self._check_write()
        keys = self._keys_array(keys)
        n = keys.shape[0]
        kp = <int64_t*>cnp.PyArray_DATA(keys)
        if self.t.objvals:
            for i in range(n):
                r = tree_delete(&self.t, kp + i * kw, &old)
                if r < 0:
                    raise MemoryError()
                if r == 1:
                    Py_DECREF(<object><PyObject*><Py_ssize_t>old)
                    removed += 1
            return removed
        self._lock_write()
        self.busy = 1
        try:
            if n < GIL_BATCH:
                for i in range(n):
                    r = tree_delete(&self.t, kp + i * kw, &old)
                    if r < 0:
                        break
                    removed += r
            else:
                with nogil:
                    for i in range(n):
                        r = tree_delete(&self.t, kp + i * kw, &old)
                        if r < 0:
                            break
                        removed += r
        finally:
            self.busy = 0
            PyThread_release_lock(self.lock)
        if r < 0:
            raise MemoryError()
        return removed

    def bulk_load(self, keys, values):
        """Replace the whole content by a batch (sorted here when it is not; last value per key wins)."""
        self._check_write()
        keys = self._keys_array(keys)
        if self.t.objvals:
            values = np.asarray(values, dtype=object)
        else:
            values = _int64_array(values, "the values of an int64 BTree")
        if values.ndim != 1 or values.shape[0] != keys.shape[0]:
            raise ValueError(f"bulk_load needs one value per key: {keys.shape[0]} keys, values of shape {values.shape}")
        keys, values = _sorted_unique_last(keys, values)
        self.clear()
        self._bulk(keys, values)

    cdef _bulk_impl(self, cnp.ndarray keys, cnp.ndarray vals):
        cdef Py_ssize_t n = keys.shape[0]
        cdef int kw = self.t.kw
        cdef BTNode* root
        cdef int64_t* kp = <int64_t*>cnp.PyArray_DATA(keys)
        cdef int64_t* vp = <int64_t*>cnp.PyArray_DATA(vals)
        with nogil:
            root = tree_bulk(kp, vp, n, kw)
        if root == NULL and n:
            raise MemoryError()
        self.t.root = root
        self.t.count = n

    cdef Py_ssize_t _merge_rebuild(self, keys, values) except -1:
        """insert_many of a batch not much smaller than the tree (int64 values): merge the sorted
        batch with the tree's entries (two sorted runs: a linear stable sort, the batch's value
        wins) and bulk-load a new tree. Snapshots keep the old nodes, which they share."""
        cdef BTNode* old
        cdef Py_ssize_t before
        self._lock_write()
        self.busy = 1       # per-call writers wait: numpy may release the GIL during the sort
        try:
            before = self.t.count
            tk, tv = self._span(NULL, NULL)
            mk, mv = _sorted_unique_last(np.concatenate((tk, keys)), np.concatenate((tv, values)))
            mv = np.ascontiguousarray(mv, dtype=np.int64)
            old = self.t.root
            self._bulk_impl(mk, mv)          # sets root and count; on MemoryError the old tree stays
            with nogil:
                node_decref(old, 0)
            return self.t.count - before
        finally:
            self.busy = 0
            PyThread_release_lock(self.lock)

    def _bulk(self, keys, values):
        cdef Py_ssize_t i, n = keys.shape[0]
        cdef cnp.int64_t[::1] raw
        if self.t.objvals:
            ptrs = np.empty(n, dtype=np.int64)
            raw = ptrs
            for i in range(n):
                v = values[i]
                Py_INCREF(v)
                raw[i] = <int64_t><Py_ssize_t><PyObject*>v
            try:
                self._bulk_impl(keys, ptrs)
            except MemoryError:
                for i in range(n):
                    Py_DECREF(<object><PyObject*><Py_ssize_t>raw[i])
                raise
        else:
            self._bulk_impl(keys, np.ascontiguousarray(values, dtype=np.int64))

    def clear(self):
        """Remove everything."""
        self._check_write()
        cdef BTNode* root = self.t.root
        self.t.root = NULL
        self.t.count = 0
        if root != NULL:
            node_decref(root, self.t.objvals)

    # -- snapshots and memory

    def snapshot(self):
        """A read-only view of the tree as it is now, in O(1); writes to this tree never reach it."""
        self._enter()
        cdef BTree s = BTree.__new__(BTree, self.t.kw, "object" if self.t.objvals else "int64")
        s.t.root = self.t.root
        s.t.count = self.t.count
        s._ro = True
        if s.t.root != NULL:
            bt_inc(&s.t.root.refs)
        return s

    def memory_bytes(self) -> int:
        """Bytes allocated for the nodes reachable from this tree (shared nodes counted in full)."""
        self._enter()
        return node_memory(self.t.root, self.t.kw)

    def depth(self) -> int:
        """Levels from the root to the leaves (0 when empty)."""
        cdef int d = 0
        cdef BTNode* nd = self.t.root
        while nd != NULL:
            d += 1
            nd = NULL if nd.leaf else nd.kids[0]
        return d

    def check(self) -> None:
        """Verify the structure: key order, separators, entry counts. Raises AssertionError."""
        self._enter()
        cnt = self._check(<Py_ssize_t>self.t.root, None, None)
        assert cnt == self.t.count, f"count {self.t.count} != {cnt} entries"

    def _check(self, Py_ssize_t addr, lo, hi):
        cdef BTNode* nd = <BTNode*>addr
        cdef int i, kw = self.t.kw
        if nd == NULL:
            return 0
        assert nd.refs >= 1
        if nd.leaf:
            assert 0 < nd.n <= nd.cap <= BT_LMAX, f"leaf n={nd.n} cap={nd.cap}"
            ks = [self._key_obj(nd.keys + i * kw) for i in range(nd.n)]
            assert all(ks[i] < ks[i + 1] for i in range(len(ks) - 1)), "leaf keys out of order"
            assert lo is None or ks[0] >= lo, "leaf key below its separator"
            assert hi is None or ks[-1] < hi, "leaf key above its separator"
            return nd.n
        assert 1 <= nd.n <= BT_IMAX, f"inner n={nd.n}"
        seps = [self._key_obj(nd.keys + i * kw) for i in range(nd.n - 1)]
        assert all(seps[i] < seps[i + 1] for i in range(len(seps) - 1)), "separators out of order"
        bounds = [lo] + seps + [hi]
        total = 0
        for i in range(nd.n):
            total += self._check(<Py_ssize_t>nd.kids[i], bounds[i], bounds[i + 1])
        return total

    def __repr__(self):
        ro = ", snapshot" if self._ro else ""
        return f"<BTree width={self.t.kw} values={self.values} len={self.t.count}{ro}>"


cdef class BTreeRange:
    """An iterator over (key, value) of a BTree range; it holds its own snapshot of the tree."""
    cdef BTree tree
    cdef Cursor c
    cdef int64_t hi[BT_MAXW]
    cdef bint has_hi

    cdef start(self, BTree src, lo, hi):
        cdef int64_t klo[BT_MAXW]
        self.tree = src.snapshot()
        self.has_hi = hi is not None
        if self.has_hi:
            self.tree._key(hi, self.hi, False)
        if lo is not None:
            self.tree._key(lo, klo, False)
            cur_seek_ge(&self.c, self.tree.t.root, klo, self.tree.t.kw)
        else:
            cur_seek_ge(&self.c, self.tree.t.root, NULL, self.tree.t.kw)

    def __iter__(self):
        return self

    def __next__(self):
        cdef BTNode* nd
        cdef int j, kw
        if self.c.depth < 0:
            raise StopIteration
        kw = self.tree.t.kw
        nd = self.c.nodes[self.c.depth]
        j = self.c.idx[self.c.depth]
        if self.has_hi and kcmp(nd.keys + j * kw, self.hi, kw) >= 0:
            self.c.depth = -1
            raise StopIteration
        out = (self.tree._key_obj(nd.keys + j * kw), self.tree._val_obj(nd.vals[j]))
        if j + 1 < nd.n:
            self.c.idx[self.c.depth] = j + 1
        else:
            cur_next_leaf(&self.c)
        return out
