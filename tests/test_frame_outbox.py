"""FrameOutbox under concurrent writers: every frame reaches the loop once, each writer's in order,
and a burst costs few flushes (it has no lock: the test races real threads against a loop thread)."""
from __future__ import annotations

import queue
import threading

from logtide.engine.rpc.frame_outbox import FrameOutbox


def test_concurrent_puts_arrive_once_in_order_with_few_flushes():
    requests: queue.SimpleQueue = queue.SimpleQueue()
    box = FrameOutbox(lambda: requests.put(1))
    got: list = []
    flushes = [0]
    stop = threading.Event()

    def loop() -> None:                     # the event loop: one take per scheduled flush
        while not stop.is_set() or not requests.empty():
            try:
                requests.get(timeout=0.01)
            except queue.Empty:
                continue
            flushes[0] += 1
            got.extend(box.take())

    writers, per = 8, 20000
    lp = threading.Thread(target=loop)
    lp.start()
    ths = [threading.Thread(target=lambda w=w: [box.put((w, k)) for k in range(per)]) for w in range(writers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    stop.set()
    lp.join(30)
    assert not lp.is_alive()
    assert box.take() == []                 # no frame was left without a flush to take it
    assert len(got) == writers * per
    for w in range(writers):
        assert [k for ww, k in got if ww == w] == list(range(per))
    assert flushes[0] <= writers * per      # never more than one flush per frame (usually far fewer)


def test_a_put_after_a_take_schedules_the_next_flush():
    scheduled = []
    box = FrameOutbox(lambda: scheduled.append(1))
    box.put(b"a")
    box.put(b"b")
    assert len(scheduled) == 1              # the second put rides on the first's flush
    assert box.take() == [b"a", b"b"]
    assert box.take() == []
    box.put(b"c")
    assert len(scheduled) == 2 and box.take() == [b"c"]
