"""The rest of a killed child's stdout, read through the same text stream as its first lines."""
from __future__ import annotations

import subprocess


def rest_of_output(p: subprocess.Popen, timeout: float = 30.0) -> str:
    """What `p` wrote after the lines already taken with readline(), once it has exited.

    Popen.communicate(timeout=...) reads the raw pipe, so it skips whatever readline() had already
    buffered: the first line it returns can start mid-line, and acknowledged lines go missing."""
    p.wait(timeout=timeout)
    return p.stdout.read()
