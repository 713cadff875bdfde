"""`make proto` (engine/rpc/protogen.py) regenerates exactly the committed modules, with
package-relative imports so they load inside logtide.engine.* packages."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOS = sorted(p for p in ROOT.rglob("*.proto") if not any(part.startswith(".") or part in ("build", "dist")
                                                              for part in p.relative_to(ROOT).parts))


def test_relative_imports():
    sys.path.insert(0, str(ROOT / "engine" / "rpc"))
    try:
        import protogen
    finally:
        sys.path.remove(str(ROOT / "engine" / "rpc"))
    src = "import grpc\nimport foo_pb2 as foo__pb2\nfrom google.protobuf import x\n"
    assert protogen.relative_imports(src) == "import grpc\nfrom . import foo_pb2 as foo__pb2\nfrom google.protobuf import x\n"


@pytest.mark.timeout(120)
def test_generated_modules_are_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools")
    assert PROTOS, "no .proto files found"
    for proto in PROTOS:
        dst = tmp_path / proto.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(proto, dst)
    p = subprocess.run([sys.executable, str(ROOT / "engine" / "rpc" / "protogen.py"), str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for proto in PROTOS:
        for suffix in ("_pb2.py",):
            rel = proto.relative_to(ROOT).with_name(proto.stem + suffix)
            assert (tmp_path / rel).read_text() == (ROOT / rel).read_text(), f"{rel} is stale: run `make proto`"
            assert "\nimport " + proto.stem + "_pb2" not in (ROOT / rel).read_text()
