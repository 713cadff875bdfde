"""Build logtide: top-level folders become subpackages of `logtide`, `_ext/*.pyx` become extensions."""
import os
import shutil
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# the compile is most of a fresh `make test`'s set-up: every CPU takes part (LOGTIDE_BUILD_JOBS=1: one)
JOBS = int(os.environ.get("LOGTIDE_BUILD_JOBS", "0")) or os.cpu_count() or 1

HERE = os.path.dirname(os.path.abspath(__file__))

# folder -> import package; everything installs under the single package `logtide`
FOLDERS = {
    "logtide": "logtide",
    "_ext": "logtide._ext",
    "logindex": "logtide.logindex",
    "replay": "logtide.replay",
    "engine": "logtide.engine",
    "spark": "logtide.spark",
}


def packages():
    pkgs, dirs = [], {}
    for folder, pkg in FOLDERS.items():
        dirs[pkg] = folder
        for root, subdirs, files in os.walk(os.path.join(HERE, folder)):
            subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
            if "__init__.py" in files:
                rel = os.path.relpath(root, os.path.join(HERE, folder))
                pkgs.append(pkg if rel == "." else pkg + "." + rel.replace(os.sep, "."))
    return sorted(pkgs), dirs


def cython_include_shim():
    """Cython resolves `logtide._ext.x` cimports by path; point logtide/_ext at _ext/."""
    shim = os.path.join(HERE, "build", "cyinc")
    pkg = os.path.join(shim, "logtide")
    os.makedirs(pkg, exist_ok=True)
    open(os.path.join(pkg, "__init__.pxd"), "a").close()
    link = os.path.join(pkg, "_ext")
    if not os.path.exists(link):
        try:
            os.symlink(os.path.join(HERE, "_ext"), link)
        except OSError:  # no symlinks on this filesystem: copy the declarations
            shutil.copytree(os.path.join(HERE, "_ext"), link)
    return shim


def extensions():
    # -g0: Python's own CFLAGS ask for debug info, a fifth of the compile of Cython's large C files
    flags = ["-O3", "-g0"] if sys.platform != "win32" else ["/O2"]
    exts = []
    for name in sorted(os.listdir(os.path.join(HERE, "_ext"))):
        if name.endswith(".pyx"):
            mod = name[:-4]
            exts.append(Extension(
                "logtide._ext." + mod,
                [os.path.join("_ext", name)],
                include_dirs=[numpy.get_include()],
                extra_compile_args=flags,
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            ))
    return cythonize(
        exts,
        include_path=[cython_include_shim()],
        compiler_directives={"language_level": 3, "embedsignature": True},
        nthreads=JOBS,
    )


class ParallelBuildExt(build_ext):
    """build_ext compiling JOBS extensions at a time."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = JOBS


PKGS, DIRS = packages()

setup(
    packages=PKGS,
    package_dir=DIRS,
    package_data={"": ["*.pxd", "*.proto"]},
    exclude_package_data={"": ["*.c", "*.pyx"]},
    ext_modules=extensions(),
    cmdclass={"build_ext": ParallelBuildExt},
    zip_safe=False,
)
