# The GIL gate: how a thread woken with others takes the GIL without sleeping on it again. Woken
# threads queue on the GIL, and a thread that sleeps on the GIL's condition variable needs one more
# wake-up, which on some hosts (a VM whose idle vCPUs halt) costs 30 us. So a woken thread that finds
# another on its way into Python spins for it, about as long as sleeping would cost here: measured as
# the engine runs, from how late woken threads run after their wake was issued. Used by the commit
# queue's appenders (waiter_list.pxd) and the RPC client's callers (call_slots.pyx). The state is
# static: each extension module that cimports this has its own gate and its own measurement.
from logtide._ext.futex cimport lt_now

cdef extern from *:
    """
    /* A hint: set while a woken thread is on its way back into Python, cleared when any thread of
       this module releases the GIL to wait. A woken thread that finds it set spins for at most
       `spin` seconds for it to clear before taking the GIL. */
    static int lt_py_busy;
    static inline void lt_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    static inline void lt_py_enter(double spin) {
        double until = -1.0, now;
        while (__atomic_load_n(&lt_py_busy, __ATOMIC_RELAXED)) {
            now = lt_now();
            if (until < 0) until = now + spin;
            else if (now >= until) break;
            lt_cpu_relax();
        }
        __atomic_store_n(&lt_py_busy, 1, __ATOMIC_RELAXED);
    }
    static inline void lt_py_leave(void) { __atomic_store_n(&lt_py_busy, 0, __ATOMIC_RELAXED); }

    /* What sleeping costs here: how long after its wake was issued the first woken waiter of a
       group ran again (a moving average, ns). On one host a wake across CPUs takes 1-5 us, on
       another (a VM whose idle vCPUs halt) 30 us. A woken thread spins for the GIL about as
       long as sleeping on it would cost (its own sleep and the wake: twice that latency) before
       it sleeps: spinning as long as a sleep costs is never worse than twice the better choice. */
    static int64_t lt_wake_issued_ns;   /* when the last group's wake was issued; 0: seen */
    static int64_t lt_wake_lat_ns = 5000;
    static inline void lt_wake_issued(void) {
        __atomic_store_n(&lt_wake_issued_ns, (int64_t)(lt_now() * 1e9), __ATOMIC_RELAXED);
    }
    static inline void lt_wake_seen(void) {
        int64_t t, d, l;
        /* read first: only the group's first waiter back writes the shared line, not all of them */
        if (__atomic_load_n(&lt_wake_issued_ns, __ATOMIC_RELAXED) == 0) return;
        t = __atomic_exchange_n(&lt_wake_issued_ns, 0, __ATOMIC_RELAXED);
        if (t <= 0) return;
        d = (int64_t)(lt_now() * 1e9) - t;
        if (d < 0 || d > 1000000) return;   /* a mark left from long ago, not a wake's latency */
        l = __atomic_load_n(&lt_wake_lat_ns, __ATOMIC_RELAXED);
        __atomic_store_n(&lt_wake_lat_ns, l + (d - l) / 8, __ATOMIC_RELAXED);
    }
    static inline double lt_spin_bound(double lo, double hi) {
        double s = (double)__atomic_load_n(&lt_wake_lat_ns, __ATOMIC_RELAXED) * 2e-9;
        return s < lo ? lo : (s > hi ? hi : s);
    }
    """
    void lt_py_enter(double spin) nogil
    void lt_py_leave() nogil
    void lt_wake_issued() nogil
    void lt_wake_seen() nogil
    double lt_spin_bound(double lo, double hi) nogil
