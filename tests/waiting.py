"""Waiting for what another process or thread does, without guessing how long it takes.

A test that waits for its own threads waits on a ``threading.Event``.  What another process does
(a child's pid file, a process gone, a server's answer finished) gives no event this process can
wait on, so :func:`until` looks again every few milliseconds and returns as soon as it holds: no
test sleeps a fixed time hoping that something has happened by then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_TICK = threading.Event()  # never set: its wait is an interruptible pause between two looks


def until(holds: Callable[[], object], seconds: float = 20.0, every: float = 0.02) -> bool:
    """Whether ``holds()`` became true within ``seconds`` (looked at every ``every`` seconds)."""
    end = time.monotonic() + seconds
    while not holds():
        if time.monotonic() >= end:
            return bool(holds())
        _TICK.wait(every)
    return True
