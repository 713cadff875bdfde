"""Helpers of the tests that drop an engine object without closing it and expect it collected."""
from __future__ import annotations

import gc
import threading
import time
import weakref


def collected(ref: weakref.ref, timeout: float = 5.0) -> bool:
    """True once the object behind `ref` is collected (with gc passes), within `timeout` seconds."""
    end = time.monotonic() + timeout
    while ref() is not None and time.monotonic() < end:
        gc.collect()
        time.sleep(0.01)
    return ref() is None


def run_threads(n: int, fn) -> None:
    """fn(k) on n threads at once, k = 0..n-1; returns when all are done."""
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def thread_names(*prefixes: str) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(prefixes))


def threads_back_to(expected: list[str], *prefixes: str, timeout: float = 5.0) -> bool:
    """True once the threads named with `prefixes` are `expected` again (the dropped ones ended)."""
    end = time.monotonic() + timeout
    while thread_names(*prefixes) != expected and time.monotonic() < end:
        time.sleep(0.01)
    return thread_names(*prefixes) == expected
