"""The installed `logtide` command and its demo stages."""
import shutil
import subprocess
import sys

import pytest


def _logtide():
    exe = shutil.which("logtide", path=str(__import__("pathlib").Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "logtide"]


def test_help_and_version():
    out = subprocess.run(_logtide() + ["--help"], capture_output=True, text=True, check=True).stdout
    assert "demo" in out
    out = subprocess.run(_logtide() + ["--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("logtide ")


def test_python_dash_m(tmp_path):
    out = subprocess.run([sys.executable, "-m", "logtide", "demo", "--list"], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    assert "bloom" in out.stdout


def test_demo_bloom_stage(tmp_path):
    p = subprocess.run(_logtide() + ["demo", "--only", "bloom", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "false negatives: 0 (must be 0)" in p.stdout
    assert "-- bloom: PASS" in p.stdout
    assert (tmp_path / "bloom" / "blooms.bin").stat().st_size == 64 * 4096


def test_bad_subcommand_is_an_error():
    p = subprocess.run(_logtide() + ["no-such-command"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid choice" in p.stderr
