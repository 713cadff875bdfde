"""The installed `logtide` command and its demo stages."""
import subprocess
import sys

from logtide_cli import logtide_cmd


def test_help_and_version():
    out = subprocess.run(logtide_cmd() + ["--help"], capture_output=True, text=True, check=True).stdout
    assert "demo" in out
    out = subprocess.run(logtide_cmd() + ["--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("logtide ")


def test_python_dash_m(tmp_path):
    out = subprocess.run([sys.executable, "-m", "logtide", "demo", "--list"], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    assert "bloom" in out.stdout


def test_demo_bloom_stage(tmp_path):
    p = subprocess.run(logtide_cmd() + ["demo", "--only", "bloom", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "false negatives: 0 (must be 0)" in p.stdout
    assert "-- bloom: PASS" in p.stdout
    assert (tmp_path / "bloom" / "blooms.bin").stat().st_size == 64 * 4096


def test_bad_subcommand_is_an_error():
    p = subprocess.run(logtide_cmd() + ["no-such-command"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_meta_serve_has_no_log_mode(tmp_path):
    """The meta-service replicates as a Raft group (--raft); the --log mode is gone, flags and all."""
    for flags in (["--log", "127.0.0.1:1"], ["--log-deadline", "1"]):
        p = subprocess.run(logtide_cmd() + ["meta", "serve", "--dir", str(tmp_path / "m"), *flags],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "unrecognized arguments" in p.stderr, p.stdout + p.stderr
    out = subprocess.run(logtide_cmd() + ["meta", "serve", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--raft" in out and "--log" not in out
