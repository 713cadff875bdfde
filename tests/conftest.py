"""Shared fixtures. The suite imports the installed wheel, never the source tree."""
import os
import sys
import sysconfig

import pytest

import logtide

_SITE = os.path.realpath(sysconfig.get_paths()["purelib"])
if not os.path.realpath(logtide.__file__).startswith(_SITE) and not os.environ.get("LOGTIDE_ALLOW_SOURCE"):
    raise RuntimeError(f"tests must run against the installed logtide, but imported {logtide.__file__}")


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(20261121)
