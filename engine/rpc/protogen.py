"""Regenerate the *_pb2.py module beside every .proto file of the repository.

    python engine/rpc/protogen.py [ROOT]      (or `make proto`; also `python -m logtide.engine.rpc.protogen`)

Each .proto compiles with its own folder as the include root, so the generated modules sit next
to it; their imports of sibling *_pb2 modules are rewritten to be package-relative, so they work
inside logtide.engine.... packages.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

SKIP_DIRS = {".venv", "build", "dist", ".git", "node_modules", "__pycache__"}


def find_protos(root: Path) -> list[Path]:
    out = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS and not s.startswith("."))
        out += [Path(d) / f for f in sorted(files) if f.endswith(".proto")]
    return out


_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.M)


def relative_imports(source: str) -> str:
    """`import x_pb2 as y` -> `from . import x_pb2 as y` (sibling modules of the same package)."""
    return _IMPORT.sub(r"from . import \1 as \2", source)


def generate(proto: Path) -> list[Path]:
    from grpc_tools import protoc
    import grpc_tools
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    folder = proto.parent
    args = ["protoc", f"-I{folder}", f"-I{include}", f"--python_out={folder}", str(proto)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {proto}")
    stem = proto.stem
    outs = [folder / f"{stem}_pb2.py"]  # services are read from its descriptor: no stub modules
    for out in outs:
        out.write_text(relative_imports(out.read_text()))
    return outs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path.cwd()
    protos = find_protos(root)
    for proto in protos:
        for out in generate(proto):
            print(f"generated {out.relative_to(root)}")
    if not protos:
        print(f"no .proto files under {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
