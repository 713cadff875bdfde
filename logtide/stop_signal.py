"""stop_event: an Event set by SIGTERM or SIGINT, which a serving command waits on before closing."""
from __future__ import annotations

import signal
import threading


def stop_event() -> threading.Event:
    """An Event that SIGTERM and SIGINT set (install from the main thread)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop
