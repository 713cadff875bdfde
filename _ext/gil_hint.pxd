# A hint kept beside the GIL for threads that come back into Python from a futex wait: a woken
# waiter waits a moment for another one on its way into Python rather than sleep on the GIL's
# condition variable (another sleep and wake-up).

cdef extern from *:
    """
    /* Process-wide like the GIL: set while a woken waiter is on its way back into Python, cleared
       when any waiter releases the GIL to wait. A woken waiter that finds it set spins for at most
       `spin` seconds for it to clear before taking the GIL. */
    #include <time.h>
    static int lt_py_busy;
    static inline double lt_py_clock(void) {
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
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
            now = lt_py_clock();
            if (until < 0) until = now + spin;
            else if (now >= until) break;
            lt_cpu_relax();
        }
        __atomic_store_n(&lt_py_busy, 1, __ATOMIC_RELAXED);
    }
    static inline void lt_py_leave(void) { __atomic_store_n(&lt_py_busy, 0, __ATOMIC_RELAXED); }
    """
    void lt_py_enter(double spin) nogil
    void lt_py_leave() nogil
