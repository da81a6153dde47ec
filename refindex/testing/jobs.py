"""Worker jobs that misbehave on purpose, to test the isolation itself.

Light to import (no h5py, no numpy), so a test can run them through a forked worker
from a process that has loaded nothing heavy, as ``refindex`` does.
"""

from __future__ import annotations

import os
import signal
import time


def selftest(kind: str, seconds: float = 3600.0) -> str:
    """A worker job that misbehaves on purpose ("crash", "hang", "ok"): checks the isolation itself."""
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        time.sleep(seconds)
    return kind


def die_while_writing(source: str, output: str) -> None:
    """Start an atomic write of ``output``, then die by SIGKILL half-way, as a crash inside libhdf5 would.

    Nothing below a signal runs: the temporary file stays unless the parent removes it.
    """
    from ..formats import atomic_file

    with atomic_file(output) as fh:
        fh.write(b"half an index")
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def hang_while_writing(source: str, output: str, seconds: float = 3600.0) -> None:
    """Start an atomic write of ``output`` and stay in the middle of it (a long scan's write):
    whoever kills the process, or its parent, must find no half-written output afterwards."""
    from ..formats import atomic_file

    with atomic_file(output) as fh:
        fh.write(b"half an index")
        fh.flush()
        time.sleep(seconds)


def stall(source: str, limit: float, moving: float = 0.0, hold: bool = True) -> str:
    """A scan of ``source`` watched with stall limit ``limit`` s (refindex.feedback.progress): it runs Python for
    ``moving`` seconds, then (``hold``) stays in one call that holds the interpreter and never returns,
    as libhdf5 looping on a damaged file does; else it stops being watched and returns "done"."""
    from ..feedback.progress import watch

    watch(limit)
    end = time.monotonic() + moving
    while time.monotonic() < end:
        sum(range(1000))
    if hold:
        sum(range(10**15))  # one C call that keeps the interpreter (hours)
    watch(None)
    return "done"
