"""Run a child script that prints one line per acknowledged operation, SIGKILL it after `acks`
lines, and return every acknowledged line parsed as a tuple of ints (lines already in the pipe
when the kill landed were acknowledged too). A child may also print "mark" lines (say, after each
checkpoint): with marks=n the kill waits for n of them as well."""
import os
import signal
import subprocess
import sys


def run_and_kill(script: str, path, start: int, acks: int, marks: int = 0) -> list[tuple[int, ...]]:
    p = subprocess.Popen([sys.executable, "-c", script, str(path), str(start)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=path)
    got = []
    seen = 0
    try:
        for line in p.stdout:
            if line.startswith("mark"):
                seen += 1
            else:
                got.append(tuple(map(int, line.split())))
            if len(got) >= acks and seen >= marks:
                break
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    got += [tuple(map(int, line.split())) for line in p.stdout.read().splitlines()
            if line.strip() and not line.startswith("mark")]
    assert p.returncode == -signal.SIGKILL, p.stderr.read()[-3000:]
    return got
