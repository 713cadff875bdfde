"""Without Java, a Spark command fails with one line that says what to install (no JVM needed)."""
import os
import subprocess
import sys
from pathlib import Path


def test_missing_java_is_one_clear_line(tmp_path):
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    env["PATH"] = str(bindir)                        # the venv's scripts, no java anywhere
    p = subprocess.run([str(bindir / "logtide"), "spark", "replay", "--dir", str(tmp_path), "--lsn", "10",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()          # an error: on stderr, nothing on stdout
    assert len(lines) == 1 and p.stdout == "", p.stdout + p.stderr
    assert "SparkSetupError" in lines[0] and "Java 17" in lines[0] and "openjdk-17-jre-headless" in lines[0]
    assert not (tmp_path / "out").exists()
