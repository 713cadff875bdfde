"""Persistent client threads for the multi-client benchmarks."""
from __future__ import annotations

import threading


class Threads:
    """n persistent threads: run(fn) calls fn(i) in each and waits for all (no thread start-up per round)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._go = threading.Barrier(n + 1)
        self._done = threading.Barrier(n + 1)
        self._fn = None
        self._errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._body, args=(i,), daemon=True) for i in range(n)]
        for th in self._threads:
            th.start()

    def _body(self, i: int) -> None:
        while True:
            self._go.wait()
            if self._fn is None:
                return
            try:
                self._fn(i)
            except BaseException as exc:  # noqa: B902 - re-raised by run()
                self._errors.append(exc)
            self._done.wait()

    def run(self, fn) -> None:
        self._fn = fn
        self._go.wait()
        self._done.wait()
        if self._errors:
            raise self._errors[0]

    def close(self) -> None:
        self._fn = None
        self._go.wait()
        for th in self._threads:
            th.join()
