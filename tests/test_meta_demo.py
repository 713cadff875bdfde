"""The meta demo stage runs end to end and its own checks pass."""
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_meta_demo_stage_passes(tmp_path):
    p = subprocess.run([sys.executable, "-m", "logtide", "demo", "--only", "meta", "--dir", str(tmp_path)],
                       capture_output=True, text=True, cwd="/", timeout=110)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "-- meta: PASS" in p.stdout and "[FAIL]" not in p.stdout
