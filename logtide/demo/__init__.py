"""The demo: stages that exercise each capability on generated data and print measured figures.

A stage is a module here with ORDER (int), NAME, TITLE and run(workdir: Path) -> bool, where the
result says whether the stage's own verification passed. Stages run in ORDER.
"""
from __future__ import annotations

import importlib
import pkgutil
import shutil
import sys
import tempfile
import time
from pathlib import Path

from logtide.errors import InvalidArgument


def stages() -> list:
    mods = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return sorted((m for m in mods if hasattr(m, "ORDER")), key=lambda m: m.ORDER)


def run_stages(workdir: str | None = None, only: list[str] | None = None) -> int:
    """Run the stages (all, or those named in `only`) in `workdir` (default: a temporary one);
    0 when every stage passed, else 1. InvalidArgument, before anything runs, for an unknown name."""
    ordered = stages()
    known = [stage.NAME for stage in ordered]
    unknown = [name for name in only or () if name not in known]
    if unknown:
        raise InvalidArgument(f"--only: unknown stage {unknown[0]!r} (one of {', '.join(known)})")
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="logtide-demo-")
        workdir = tmp
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    failed = []
    try:
        for stage in ordered:
            if only and stage.NAME not in only:
                continue
            print(f"\n== {stage.TITLE} ==", flush=True)
            t0 = time.perf_counter()
            sdir = root / stage.NAME
            sdir.mkdir(exist_ok=True)
            ok = stage.run(sdir)
            print(f"-- {stage.NAME}: {'PASS' if ok else 'FAIL'} in {time.perf_counter() - t0:.2f}s", flush=True)
            if not ok:
                failed.append(stage.NAME)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"\ndemo: FAILED stages: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("\ndemo: all stages passed")
    return 0
