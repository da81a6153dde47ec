"""Child processes that end with their parent, and take what they half-wrote with them.

``refindex scan`` runs its work in a forked child (:mod:`refindex.isolation.forked`), which a parent's
timer kills when it overruns.  When the parent itself is killed (``kill -9``, an OOM kill, a
closed terminal), nothing would stop the child: it would write its output later, unasked.
:func:`die_with_parent` makes the kernel kill it then (Linux ``PR_SET_PDEATHSIG``; a child
that must outlive the thread that forked it watches a pipe, :func:`exit_with_process`), and
:func:`clean_after` leaves a tiny sentinel process behind that removes the temporary files
the dead child had started (it cannot do that itself: a killed process runs no code).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Linux: this process is killed (SIGKILL) when its parent ``parent`` dies; it ends at once
    when the parent is gone already.  Elsewhere nothing happens.  (The kernel's "parent" is the
    thread that forked: a child that must outlive that thread uses :func:`exit_with_process`.)"""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)


def silenced(*fds: int) -> None:
    """The descriptors ``fds`` (of a forked helper: its stdout, stderr) go to the null device:
    warnings, libhdf5's messages and progress bars there are nobody's to read."""
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        os.dup2(quiet, fd)
    if quiet not in fds:
        os.close(quiet)


def process_pipe() -> tuple[int, int]:
    """A pipe whose write end this process keeps (and closes once the child it is for has ended):
    a child forked after it learns from its read end that this process ended, whatever thread
    forked it (:func:`exit_with_process`)."""
    return os.pipe()


def exit_with_process(pipe: tuple[int, int]) -> None:
    """In a child forked after :func:`process_pipe`: end (``os._exit``) as soon as the process that
    made the pipe has ended, every thread of it.  A thread waits for the end of file that comes
    when no process keeps the write end (another child the parent forked meanwhile keeps it open
    too, until it ends: give the child a time limit of its own as well)."""
    r, w = pipe
    os.close(w)

    def watch() -> None:
        while True:
            try:
                if not os.read(r, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os._exit(1)

    threading.Thread(target=watch, name="refindex-parent-watch", daemon=True).start()


def clean_after(cleanup: Callable[[int], None]) -> int | None:
    """Fork a sentinel that runs ``cleanup(pid)`` of this process if it dies without calling
    :func:`finished` (killed with its parent, crashed); returns the handle for :func:`finished`.

    The sentinel only waits on a pipe this process holds the other end of, so it lives
    exactly as long as this process, plus the cleanup.
    """
    worker = os.getpid()
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:  # no fork (memory, process limits): no sentinel, the parent still cleans up
        return None
    if pid != 0:
        os.close(r)
        return w
    status = 0
    try:
        # Hold nothing of the worker's but this pipe: an inherited end of the worker's answer
        # pipe would keep its parent waiting for an end of file that never comes.
        os.closerange(3, r)
        os.closerange(r + 1, _max_fd())
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # what ends the group ends the worker; this one cleans up after
        silenced(0, 1, 2)
        if os.read(r, 1) != b"1":  # the worker ended without saying it finished
            cleanup(worker)
    except BaseException:  # noqa: BLE001 - the sentinel never returns into the caller's code
        status = 1
    finally:
        os._exit(status)


def finished(handle: int | None) -> None:
    """Tell the sentinel of :func:`clean_after` that this process finished: nothing to clean."""
    if handle is None:
        return
    try:
        os.write(handle, b"1")
        os.close(handle)
    except OSError:
        pass


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 256)
    except (OSError, ValueError):
        return 4096
