"""logtide.cpu_affinity and `logtide --cpus`: CPU lists parsed as taskset takes them, bad ones refused
by name, a confined region's threads on its CPUs, and a server whose every thread runs where it was told."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from logtide_cli import logtide_cmd

from logtide.cpu_affinity import allowed_cpus, confine_process, confined, parse_cpus

pytestmark = pytest.mark.timeout(120)


def test_parse_cpus_takes_taskset_lists():
    assert parse_cpus("0") == {0}
    assert parse_cpus("0,2") == {0, 2}
    assert parse_cpus(" 1-3, 6 ") == {1, 2, 3, 6}
    assert parse_cpus("2-2") == {2}


@pytest.mark.parametrize("spec", ["", " ", "a", "1-", "-1", "3-1", "1,,2", "0x1", None, 3])
def test_parse_cpus_refuses_bad_lists(spec):
    with pytest.raises(ValueError, match="CPU"):
        parse_cpus(spec)


def test_a_cpu_the_process_may_not_use_is_refused_by_number():
    missing = max(allowed_cpus()) + 1000
    with pytest.raises(ValueError, match=f"CPU {missing} is not available"):
        with confined({missing}):
            pass
    with pytest.raises(ValueError, match="empty"):
        confine_process(set())


def test_threads_started_in_a_confined_region_share_it_and_the_caller_gets_its_set_back():
    before = os.sched_getaffinity(0)
    cpu = min(before)
    seen = {}

    def report():
        seen["child"] = os.sched_getaffinity(0)

    with confined({cpu}) as cpus:
        assert cpus == {cpu} and os.sched_getaffinity(0) == {cpu}
        t = threading.Thread(target=report)
        t.start()
        t.join()
    assert seen["child"] == {cpu}
    assert os.sched_getaffinity(0) == before


def test_a_confined_process_may_widen_again_to_the_cpus_it_had():
    # a check against the calling thread's own set refused this: once on one CPU, every other
    # looked unavailable (on a one-CPU machine the widening is to the same set, and still allowed)
    before = frozenset(os.sched_getaffinity(0))
    try:
        assert confine_process({min(before)}) == {min(before)}
        assert os.sched_getaffinity(0) == {min(before)}
        assert confine_process(before) == before
        assert os.sched_getaffinity(0) == before
        with pytest.raises(ValueError, match=f"CPU {max(before) + 1000} is not available"):
            confine_process(before | {max(before) + 1000})
        assert os.sched_getaffinity(0) == before        # a refused set changes nothing
    finally:
        os.sched_setaffinity(0, before)


def _allowed_list(pid: int, tid: str) -> str:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_a_server_started_with_cpus_runs_every_thread_there(tmp_path):
    from logtide import connect_logservice
    cpu = max(allowed_cpus())
    p = subprocess.Popen(logtide_cmd() + ["--cpus", str(cpu), "logservice", "serve", "--dir", str(tmp_path / "log"),
                                       "--listen", "127.0.0.1:0", "--stats-interval", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        address = p.stdout.readline().split(" on ")[1].split()[0]
        with connect_logservice(address) as c:
            assert c.append_many([b"a", b"b"]) == 1      # serving: its loop, workers and flusher are up
        tids = os.listdir(f"/proc/{p.pid}/task")
        assert len(tids) > 1
        assert {_allowed_list(p.pid, t) for t in tids} == {str(cpu)}
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    assert p.returncode == 0


def test_a_bad_cpu_list_is_a_one_line_error(tmp_path):
    for spec, says in (("x", "not a CPU number"), (str(max(allowed_cpus()) + 1000), "is not available")):
        p = subprocess.run(logtide_cmd() + ["--cpus", spec, "logservice", "info", "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr
