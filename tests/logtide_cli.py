"""How tests start the installed `logtide` command."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path


def logtide_cmd() -> list[str]:
    """argv of the `logtide` console script beside this interpreter (or `python -m logtide`)."""
    exe = shutil.which("logtide", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "logtide"]
