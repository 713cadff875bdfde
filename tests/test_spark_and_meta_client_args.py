"""Bad arguments to the Spark entry points and the meta client are refused with typed errors,
before Spark runs (the spark session passed is None) or, for the meta client, at construction."""
from __future__ import annotations

import subprocess

import pytest

from logtide.errors import InvalidArgument, MetaInvalidArgument
from logtide.spark.errors import ReplayInputError
from logtide_cli import logtide_cmd

NAN = float("nan")


@pytest.mark.parametrize("ts,error", [(NAN, TypeError), (6.5, TypeError), (True, TypeError), ("5", TypeError),
                                      (None, TypeError), (-1, InvalidArgument), (2**70, InvalidArgument),
                                      (2**64, InvalidArgument)])
def test_snapshot_ts_is_checked_before_spark(tmp_path, ts, error):
    from logtide.spark.snapshot_job import plan_snapshot, table_snapshot
    with pytest.raises(error, match="ts"):
        table_snapshot(None, tmp_path, "t", ts)
    with pytest.raises(error, match="ts"):
        plan_snapshot(tmp_path, "t", ts)


@pytest.mark.parametrize("partitions", [0, -3, 2.7, "3", True, False, NAN, [1]])
def test_replay_partitions_must_be_none_or_an_int_at_least_1(tmp_path, partitions):
    from logtide.spark.replay_job import partitioned_replay
    with pytest.raises(ReplayInputError, match="partitions"):
        partitioned_replay(None, tmp_path, 5, tmp_path / "out", partitions=partitions)


@pytest.mark.parametrize("target", [True, False, 0, -1, 1.5, "5", NAN])
def test_replay_target_lsn_must_be_a_positive_int(tmp_path, target):
    from logtide.spark.replay_job import partitioned_replay
    with pytest.raises(ReplayInputError, match="target LSN"):
        partitioned_replay(None, tmp_path, target, tmp_path / "out", partitions=2)


@pytest.mark.parametrize("lo,hi", [(NAN, NAN), (1.5, 2.5), (True, 5), (0, True), (0, float("inf")), (0, 2**70),
                                   ("0", "10"), (None, 5), (5, None), (-1, 5), (6, 5)])
def test_changed_pages_lsn_bounds_are_checked_before_spark(tmp_path, lo, hi):
    from logtide.spark.changed_pages import pg_changed_pages
    with pytest.raises(InvalidArgument):
        pg_changed_pages(None, tmp_path, lo, hi)


@pytest.fixture(scope="module")
def meta_addr():
    p = subprocess.Popen(logtide_cmd() + ["meta", "serve", "--memory", "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("meta-service listening on "), line
        yield line.split()[-1]
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("timeout", [NAN, 0, -1, float("inf"), -float("inf"), 10**400, True, False, "5", None])
def test_meta_client_timeout_must_be_a_finite_number_above_0(meta_addr, timeout):
    from logtide import connect_meta
    from logtide.engine.meta.service import MetaService
    from logtide.errors import MetaError
    for target in (meta_addr, MetaService()):
        with pytest.raises(InvalidArgument, match="timeout") as got:
            connect_meta(target, timeout=timeout)
        assert isinstance(got.value, MetaError)     # as the client's other argument errors are


def test_meta_client_good_timeouts_work(meta_addr):
    from logtide import connect_meta
    for t in (2, 2.5):
        with connect_meta(meta_addr, timeout=t) as c:
            c.upsert("k", b"v")
            assert c.get("k").data == b"v"


@pytest.mark.parametrize("flag", ["no", 0, 1, None, 1.0])
def test_meta_watch_initial_flush_must_be_a_bool(meta_addr, flag):
    from logtide import connect_meta
    from logtide.engine.meta.service import MetaService
    with connect_meta(meta_addr, timeout=5) as c:
        with pytest.raises(MetaInvalidArgument, match="initial_flush must be a bool"):
            c.watch("wk", initial_flush=flag)
    with pytest.raises(MetaInvalidArgument, match="initial_flush must be a bool"):
        MetaService().watch("wk", initial_flush=flag)      # the embedded service gives the same error


def test_meta_watch_initial_flush_true_and_false(meta_addr):
    from logtide import connect_meta
    with connect_meta(meta_addr, timeout=5) as c:
        c.upsert("wk", b"v")
        w = c.watch("wk", initial_flush=True)
        try:
            assert w.get(timeout=5).is_initialization
        finally:
            w.close()
        w = c.watch("wk", initial_flush=False)
        try:
            c.upsert("wk", b"v2")
            e = w.get(timeout=5)
            assert e is not None and not e.is_initialization
        finally:
            w.close()
