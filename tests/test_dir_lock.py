"""One open owner per directory: a second open of a log, meta-service or primary directory is refused
with a typed error (in this process or another), and a service whose directory is removed under it
fails with a typed error instead of the FileNotFoundError on logservice.state.tmp seen before."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from logtide.engine.logservice import LogService
from logtide.engine.meta.service import MetaService
from logtide.errors import DirectoryInUseError, LogDirectoryInUse, LogServiceError, LogServiceFailed
from logtide.replay import Primary


def test_second_log_service_open_is_refused_until_the_first_closes(tmp_path):
    a = LogService.open(tmp_path / "log")
    with pytest.raises(LogDirectoryInUse) as info:
        LogService.open(tmp_path / "log")
    assert isinstance(info.value, DirectoryInUseError) and isinstance(info.value, LogServiceError)
    assert "in use" in str(info.value)
    a.append(b"x")
    a.close()
    b = LogService.open(tmp_path / "log")
    assert b.get_latest_lsn() == 1
    b.close()


def test_second_open_from_another_process_is_refused(tmp_path):
    exe = Path(sys.executable).with_name("logtide")
    p = subprocess.Popen([str(exe), "logservice", "serve", "--dir", str(tmp_path / "log"), "--stats-interval", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        assert "serving" in line, line
        with pytest.raises(LogDirectoryInUse):
            LogService.open(tmp_path / "log")
        p.kill()                               # kill -9 drops the lock with the process
        p.wait(10)
        LogService.open(tmp_path / "log").close()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_meta_and_primary_directories_have_one_owner(tmp_path):
    m = MetaService.open(tmp_path / "meta")
    with pytest.raises(DirectoryInUseError):
        MetaService.open(tmp_path / "meta")
    m.close()
    MetaService.open(tmp_path / "meta").close()

    log = LogService.open(tmp_path / "shared" / "log")
    p = Primary(tmp_path / "shared", log=log, checkpoint_interval=0)
    with pytest.raises(DirectoryInUseError):
        Primary(tmp_path / "shared", log=log, checkpoint_interval=0)
    p.crash()                                  # a crashed primary's lock goes, as its process's would
    p.index.close()
    q = Primary(tmp_path / "shared", log=log, checkpoint_interval=0)
    q.close()
    log.close()


def test_directory_removed_under_an_open_log_service_fails_typed(tmp_path):
    """The investigation: with one open service per directory nobody else writes
    logservice.state.tmp. The FileNotFoundError came from removing the directory of a service that
    was still open (a test's temporary directory removed with a leaked service in it): either
    rmtree lists logservice.state.tmp just before the service renames it (rmtree's unlink fails:
    this suite hit exactly that while this test still ran the truncation worker), or the service's
    next state save finds its directory gone (and, if the path was created again, used to write its
    state into the new owner's directory). Now the service checks, before each save, that its lock
    file is the one it locked, and fails with LogServiceFailed; it never writes into the new one."""
    d = tmp_path / "log"
    svc = LogService.open(d, truncation_interval=0)     # no worker: the saves below are the test's
    svc.register_reader("r", 0)
    svc.append(b"x")
    svc.report_replayed("r", 1)                # dirty: the next truncation round saves the state
    shutil.rmtree(d)
    with pytest.raises(LogServiceFailed, match="removed or replaced"):
        svc.run_truncation()
    d.mkdir()
    other = LogService.open(d)                 # a new owner of the same path
    with pytest.raises(LogServiceFailed):
        svc.truncate(1)
    with pytest.raises(LogServiceFailed):
        svc.register_reader("q", 0)
    assert not (d / "logservice.state.tmp").exists()
    assert other.readers() == {}               # the old service wrote nothing here
    assert other.get_latest_lsn() == 0
    other.close()
    with pytest.raises(LogServiceFailed):
        svc.close()                            # its unsaved reports are lost, and it says so
