# Thread synchronisation without Python, for code that runs with the GIL released: atomic loads and
# stores, futex words (sleep until a word changes, wake its sleepers), a pthread mutex and the
# monotonic clock, and an eventfd's wake-up. Linux only: the commit queue's waiters sleep on futexes.
from libc.stdint cimport uint64_t

cdef extern from *:
    """
    #include <pthread.h>
    #include <errno.h>
    #include <time.h>
    #include <unistd.h>
    #include <stdint.h>
    #ifdef __linux__
    #include <linux/futex.h>
    #include <sys/syscall.h>
    #else
    #error "the log service's commit queue waits on Linux futexes"
    #endif

    static inline int lt_load(int* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
    static inline uint64_t lt_load64(uint64_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
    static inline void lt_store64(uint64_t* w, uint64_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
    static inline void lt_store(int* w, int v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
    static inline void lt_bump(int* w) { __atomic_add_fetch(w, 1, __ATOMIC_RELEASE); }
    static inline void lt_futex_wait(int* w, int val, long long ns) {
        struct timespec ts;
        ts.tv_sec = ns / 1000000000LL; ts.tv_nsec = ns % 1000000000LL;
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
    }
    static inline void lt_futex_wait_forever(int* w, int val) {
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
    }
    static inline void lt_futex_wake(int* w, int n) { syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }
    /* wake every sleeper of a shared word: bumped first, so a waiter that read it before does not sleep */
    static inline void lt_futex_wake_all(int* w) { lt_bump(w); lt_futex_wake(w, 0x7FFFFFFF); }
    /* wake whatever watches eventfd fd (an event loop): one nonblocking write; a full counter only
       means a wake-up is already due */
    static inline void lt_notify(int fd) { uint64_t one = 1; ssize_t r = write(fd, &one, 8); (void)r; }
    static inline double lt_now(void) {
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    typedef struct { pthread_mutex_t mu; } lt_mutex;
    static inline void lt_mutex_init(lt_mutex* m) { pthread_mutex_init(&m->mu, NULL); }
    static inline void lt_mutex_destroy(lt_mutex* m) { pthread_mutex_destroy(&m->mu); }
    static inline void lt_lock(lt_mutex* m) { pthread_mutex_lock(&m->mu); }
    static inline void lt_unlock(lt_mutex* m) { pthread_mutex_unlock(&m->mu); }
    static inline int lt_errno(void) { return errno; }
    static inline int lt_eintr(void) { return errno == EINTR; }
    """
    ctypedef struct lt_mutex:
        pass
    int lt_load(int* w) nogil
    uint64_t lt_load64(uint64_t* w) nogil
    void lt_store64(uint64_t* w, uint64_t v) nogil
    void lt_store(int* w, int v) nogil
    void lt_bump(int* w) nogil
    void lt_futex_wait(int* w, int val, long long ns) nogil
    void lt_futex_wait_forever(int* w, int val) nogil
    void lt_futex_wake(int* w, int n) nogil
    void lt_futex_wake_all(int* w) nogil
    void lt_notify(int fd) nogil
    double lt_now() nogil
    void lt_mutex_init(lt_mutex* m) nogil
    void lt_mutex_destroy(lt_mutex* m) nogil
    void lt_lock(lt_mutex* m) nogil
    void lt_unlock(lt_mutex* m) nogil
    int lt_errno() nogil
    int lt_eintr() nogil
