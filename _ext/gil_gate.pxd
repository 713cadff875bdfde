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
    #include <sched.h>
    /* Set while a woken thread is on its way back into Python (it claimed the gate), cleared when
       any thread of this module releases the GIL to wait. A woken thread that finds it set spins
       (with `pause`) for it to clear, for at most `spin` seconds, then takes the GIL.
       A `patient` thread claims the gate by compare-and-swap instead (woken threads pass one at a
       time) and, past the spin, yields its CPU to whatever else is runnable there and waits on,
       rather than sleep on the GIL (one wake-up more, and with many woken threads a queue on the
       GIL's own mutex). It waits only while the gate is passed on regularly: a claim older than
       4 x the usual time from a claim to the next wait (between 50 us and 2 ms) is from a thread
       that went on in Python without waiting, and is taken over. Used by the TN's and the
       primary's writers (32 TN writers 25K commits/s against 18K) and by the RPC client's callers
       (32 threads on one client, 6 Dec host: 42-43K calls/s against 25-32K, a third less CPU per
       call; on the faster 5 Dec host their yields took CPU from the server, 46K against 55K).
       Both are patient only while claims are passed on within their spin (lt_py_short_holds):
       threads that run Python between their calls would otherwise be waited for by yields in a
       loop (16 TN writers with 30 us of Python between commits: 336-350 us of CPU per commit and
       47-54 context switches, against 213-215 us and 5 once that rule holds). */
    static int lt_py_busy;
    static int64_t lt_py_since_ns;          /* when the gate was last claimed */
    /* For long spins (lt_py_queue_spin): the woken threads queued for the GIL (from their claim
       to lt_py_got), and a moving average of how long one then runs Python before it waits again. */
    static int lt_py_queued;
    static int64_t lt_py_run_ns = 10000;
    static __thread int lt_py_claimed;      /* this thread is queued (lt_py_queue_spin) */
    static __thread int64_t lt_py_got_ns;   /* when this thread got the GIL after queueing (0: not) */
    static int64_t lt_py_hold_ns = 20000;   /* moving average: claim to the next wait */
    static inline void lt_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    static inline int64_t lt_now_ns(void) { return (int64_t)(lt_now() * 1e9); }
    static inline void lt_py_enter(double spin, int patient) {
        int64_t start = -1, now, stale, since;
        int free_;
        if (!patient) {     /* a hint only: spin while it is set, at most `spin` seconds */
            while (__atomic_load_n(&lt_py_busy, __ATOMIC_RELAXED)) {
                now = lt_now_ns();
                if (start < 0) start = now;
                else if ((double)(now - start) >= spin * 1e9) break;
                lt_cpu_relax();
            }
            __atomic_store_n(&lt_py_busy, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&lt_py_since_ns, lt_now_ns(), __ATOMIC_RELAXED);
            return;
        }
        for (;;) {
            free_ = 0;
            if (__atomic_compare_exchange_n(&lt_py_busy, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                break;
            now = lt_now_ns();
            if (start < 0) start = now;
            since = __atomic_load_n(&lt_py_since_ns, __ATOMIC_RELAXED);
            stale = 4 * __atomic_load_n(&lt_py_hold_ns, __ATOMIC_RELAXED);
            stale = stale < 50000 ? 50000 : (stale > 2000000 ? 2000000 : stale);
            if (now - since >= stale) {      /* its holder went on without waiting: take it over */
                __atomic_store_n(&lt_py_busy, 1, __ATOMIC_RELAXED);
                break;
            }
            if ((double)(now - start) < spin * 1e9) lt_cpu_relax();
            else sched_yield();
        }
        __atomic_store_n(&lt_py_since_ns, lt_now_ns(), __ATOMIC_RELAXED);
    }
    /* The spin for lt_py_enter of a woken thread that queues for the GIL: `spin`, or none when the
       threads queued ahead would run longer than that. It would then end asleep on the GIL after
       a whole spin: with 32 callers woken by one reply frame most did, and the client's CPU per
       call fell from 52 to 45 us without it. Short spins (the commit queue's 5 us) do not queue: most
       of theirs succeed, and sleeping at once cost its appenders twice the CPU. */
    static inline double lt_py_queue_spin(double spin) {
        int ahead = 0;
        if (!lt_py_claimed) {
            ahead = __atomic_fetch_add(&lt_py_queued, 1, __ATOMIC_RELAXED);
            lt_py_claimed = 1;
        }
        return (double)(ahead + 1) * (double)__atomic_load_n(&lt_py_run_ns, __ATOMIC_RELAXED) > spin * 1e9
            ? 0.0 : spin;
    }
    static inline int lt_py_queued_now(void) { return __atomic_load_n(&lt_py_queued, __ATOMIC_RELAXED); }
    /* With the GIL, after a queued lt_py_enter: this thread is out of the queue (else a no-op). */
    static inline void lt_py_got(void) {
        if (!lt_py_claimed) return;
        lt_py_claimed = 0;
        __atomic_fetch_sub(&lt_py_queued, 1, __ATOMIC_RELAXED);
        lt_py_got_ns = lt_now_ns();
    }
    /* Whether a woken thread should be patient: only while a claim is usually passed on within
       `limit` seconds (the moving average from a claim to the holder's next wait). Callers that
       run Python between their calls hold it longer, and waiting patiently for them would yield
       in a loop on an otherwise idle CPU: 32 threads of an RPC client doing 30 us of Python per
       call spent 206 us of CPU per call patient, against 126 sleeping on the GIL. */
    static inline int lt_py_short_holds(double limit) {
        return (double)__atomic_load_n(&lt_py_hold_ns, __ATOMIC_RELAXED) <= limit * 1e9;
    }
    static inline void lt_py_leave(void) {
        int64_t d, h;
        if (lt_py_got_ns) {
            d = lt_now_ns() - lt_py_got_ns;
            lt_py_got_ns = 0;
            if (d > 0 && d < 10000000) {
                h = __atomic_load_n(&lt_py_run_ns, __ATOMIC_RELAXED);
                __atomic_store_n(&lt_py_run_ns, h + (d - h) / 8, __ATOMIC_RELAXED);
            }
        }
        if (!__atomic_load_n(&lt_py_busy, __ATOMIC_RELAXED)) return;
        __atomic_store_n(&lt_py_busy, 0, __ATOMIC_RELEASE);
        d = lt_now_ns() - __atomic_load_n(&lt_py_since_ns, __ATOMIC_RELAXED);
        if (d > 0 && d < 10000000) {
            h = __atomic_load_n(&lt_py_hold_ns, __ATOMIC_RELAXED);
            __atomic_store_n(&lt_py_hold_ns, h + (d - h) / 8, __ATOMIC_RELAXED);
        }
    }

    /* What sleeping costs here: how long after its wake was issued the first woken waiter of a
       group ran again (a moving average, ns). On one host a wake across CPUs takes 1-5 us, on
       another (a VM whose idle vCPUs halt) 30 us. A woken thread spins for the GIL about as
       long as sleeping on it would cost (its own sleep and the wake: twice that latency) before
       it sleeps: spinning as long as a sleep costs is never worse than twice the better choice. */
    static int64_t lt_wake_issued_ns;   /* when the last group's wake was issued; 0: seen */
    static int64_t lt_wake_lat_ns = 5000;
    static inline void lt_wake_issued(void) {
        __atomic_store_n(&lt_wake_issued_ns, lt_now_ns(), __ATOMIC_RELAXED);
    }
    static inline void lt_wake_seen(void) {
        int64_t t, d, l;
        /* read first: only the group's first waiter back writes the shared line, not all of them */
        if (__atomic_load_n(&lt_wake_issued_ns, __ATOMIC_RELAXED) == 0) return;
        t = __atomic_exchange_n(&lt_wake_issued_ns, 0, __ATOMIC_RELAXED);
        if (t <= 0) return;
        d = lt_now_ns() - t;
        if (d < 0 || d > 1000000) return;   /* a mark left from long ago, not a wake's latency */
        l = __atomic_load_n(&lt_wake_lat_ns, __ATOMIC_RELAXED);
        __atomic_store_n(&lt_wake_lat_ns, l + (d - l) / 8, __ATOMIC_RELAXED);
    }
    static inline double lt_spin_bound(double lo, double hi) {
        double s = (double)__atomic_load_n(&lt_wake_lat_ns, __ATOMIC_RELAXED) * 2e-9;
        return s < lo ? lo : (s > hi ? hi : s);
    }
    """
    void lt_py_enter(double spin, int patient) nogil
    double lt_py_queue_spin(double spin) nogil
    void lt_py_got() nogil
    int lt_py_queued_now() nogil
    void lt_py_leave() nogil
    int lt_py_short_holds(double limit) nogil
    void lt_wake_issued() nogil
    void lt_wake_seen() nogil
    double lt_spin_bound(double lo, double hi) nogil
