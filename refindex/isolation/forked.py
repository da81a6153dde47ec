"""One isolated call for the command line: a forked child when that is safe, else a Worker.

``refindex scan`` runs libhdf5 on files nobody vetted, and libhdf5 can abort, segfault or
loop forever on a damaged one (see tests/test_hostile.py).  :func:`run_once` runs one
job in a child process with a time limit, so such a file ends in a WorkerCrashed or
WorkerTimeout error instead of taking the command down.

The child is an ``os.fork()`` of the command itself, made before anything heavy is
imported: it costs a few milliseconds where a fresh interpreter (:class:`refindex.isolation.worker.Worker`)
costs ~0.3 s of start-up and imports, and the parent never loads libhdf5 at all.  A fork
is only safe in a process with one thread (a fork copies one thread; locks held by the
others stay locked forever in the child), so :func:`can_fork` checks that, native threads
included; otherwise, or without ``os.fork``, the job goes to a fresh-interpreter Worker.
The Python API does not use this: a scan that depends on a child process the caller did
not ask for would inherit the caller's threads and locks.  (The split walk of
:mod:`refindex.scanner._split` forks a helper the scan never waits for.)
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from typing import Any, Iterator, NoReturn

from .worker import (Cleanup, Job, StallWatch, death_error, job_outcome, pulse_sender, rebuild_error, run_isolated,
                     stall_error, timeout_error, unsendable)
from .lifetime import clean_after, die_with_parent, finished
from ..options import time_limit  # noqa: F401 - the default limit of an isolated scan (one policy, in options)
from ..feedback.progress import set_watcher

_HEADER = struct.Struct("<Q")  # the child's message: its length, then a pickle
_STDERR_KEPT = 1 << 20  # bytes of a quiet child's stderr kept (the most recent)


def can_fork() -> bool:
    """True when this process may fork a worker: POSIX fork, called from the main thread, no other thread.

    Native threads count too (a BLAS pool, an I/O library), where ``/proc`` shows them.
    """
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc (macOS): the Python threads are what can be seen
        return True


def run_once(job: Job, kwargs: dict[str, Any], *, timeout: float, label: str | None = None,
             cleanup: Cleanup | None = None, quiet: bool = False) -> Any:
    """``job(**kwargs)`` in a child process killed after ``timeout`` seconds; its result or its error.

    ``job`` is a module-level refindex function with picklable arguments and result (it may
    go to a fresh-interpreter Worker).  Raises WorkerCrashed when the child dies (a signal:
    "libhdf5 crashed (signal 6, SIGABRT)"), WorkerTimeout when it overruns, or the job's own
    RefindexError.  ``cleanup(pid)`` runs after a child died or was killed mid-job.
    ``quiet``: hold the child's stderr back until it ends (see :func:`run_forked`).
    """
    if can_fork():
        return run_forked(job, kwargs, timeout=timeout, label=label, cleanup=cleanup, quiet=quiet)
    return run_isolated(job, kwargs, timeout=timeout, label=label, cleanup=cleanup)


def run_forked(job: Job, kwargs: dict[str, Any], *, timeout: float, label: str | None = None,
               cleanup: Cleanup | None = None, quiet: bool = False) -> Any:
    """:func:`run_once` in a forked child (the caller checked :func:`can_fork`).

    ``quiet``: the child's stderr goes through a pipe and is passed on when the child ends
    well; when it crashes, what it printed (glibc's "free(): double free detected", say)
    is kept out of the way, so the command ends with one line, and goes with the error as
    ``worker_traceback`` (``refindex --debug`` shows it).  Otherwise the child writes to
    this stderr directly (a live progress bar).
    """
    label = label or (str(kwargs["source"]) if kwargs.get("source") is not None else None)
    child = _Child(job, kwargs, quiet, cleanup)
    try:
        with _terminate_as_exception():
            message = child.answer(time.monotonic() + timeout)
    except BaseException as e:  # timed out, stuck, interrupted, terminated: the child goes too
        child.kill()
        if cleanup is not None:
            cleanup(child.pid)
        if isinstance(e, _Stuck):
            raise stall_error(e.limit, label) from None
        if isinstance(e, TimeoutError):
            raise timeout_error(timeout, label) from None
        if isinstance(e, _Terminated):
            os.kill(os.getpid(), signal.SIGTERM)  # the default action again: end as terminated
        raise
    code, printed = child.finish()
    if message is None:  # the pipe closed before a whole answer: the child died
        if cleanup is not None:
            cleanup(child.pid)
        err = death_error(code, label, printed.decode(errors="replace"))
        err.worker_traceback = printed.decode(errors="replace")
        raise err
    sys.stderr.write(printed.decode(errors="replace"))
    msg = pickle.loads(message)
    if msg[0] == "ok":
        return msg[1]
    raise rebuild_error(*msg[1:])


class _Child:
    """A forked child running one job; its answer pipe and (``quiet``) its stderr pipe.

    The child dies with this process (:func:`~refindex.isolation.lifetime.die_with_parent`), and a
    sentinel runs ``cleanup`` on its half-written output if it is killed that way.
    """

    def __init__(self, job: Job, kwargs: dict[str, Any], quiet: bool, cleanup: Cleanup | None = None):
        for stream in (sys.stdout, sys.stderr):  # or the child would print what is buffered a second time
            stream.flush()
        r, w = os.pipe()
        er, ew = os.pipe() if quiet else (-1, -1)
        pr, pw = os.pipe()
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(r)
            os.close(pr)
            if er >= 0:
                os.close(er)
            die_with_parent(parent)
            set_watcher(pulse_sender(pw))  # (after the fork: the fork itself clears any watcher)
            sentinel = clean_after(cleanup) if cleanup is not None else None
            if quiet:
                os.dup2(ew, 2)
                os.close(ew)
                os.environ["LIBC_FATAL_STDERR_"] = "1"  # glibc's last words to stderr, not to the terminal
            # What libraries print (a filter plugin's complaints) is a diagnostic: never the command's output.
            os.dup2(2, 1)
            _child(w, job, kwargs, sentinel)
        os.close(w)
        os.close(pw)
        if quiet:
            os.close(ew)
        self.answer_fd, self.stderr_fd, self.pulse_fd = r, er, pr
        self.data = {fd: bytearray() for fd in (r, er) if fd >= 0}
        self.open = set(self.data) | {pr}
        self.watch = StallWatch()

    def answer(self, deadline: float) -> bytes | None:
        """The child's whole answer, or None when its pipe closes first; TimeoutError at ``deadline``."""
        buf = self.data[self.answer_fd]
        while True:
            if len(buf) >= _HEADER.size:
                need = _HEADER.size + _HEADER.unpack_from(buf)[0]
                if len(buf) >= need:
                    return bytes(buf[_HEADER.size:need])
            if self.answer_fd not in self.open:
                return None
            until = min(deadline, self.watch.deadline())
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError if until >= deadline else _Stuck(self.watch.limit)
            self._read(left)

    def _read(self, wait: float) -> None:
        """Read what is there on the open pipes (waiting at most ``wait`` seconds for something)."""
        ready, _, _ = select.select(sorted(self.open), [], [], max(wait, 0.0))
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.open.discard(fd)
                os.close(fd)
                continue
            if fd == self.pulse_fd:
                self.watch.feed(chunk)
                continue
            buf = self.data[fd]
            buf += chunk
            if fd == self.stderr_fd and len(buf) > _STDERR_KEPT:
                del buf[:len(buf) - _STDERR_KEPT]  # keep the most recent part

    def finish(self) -> tuple[int | None, bytes]:
        """Reap the child: its exit code (minus the signal that ended it) and the stderr it printed."""
        code = _reap(self.pid)
        end = time.monotonic() + 1.0
        while self.stderr_fd in self.open and time.monotonic() < end:  # the rest of what it printed
            self._read(end - time.monotonic())
        self._close()
        return code, bytes(self.data.get(self.stderr_fd, b""))

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(self.pid)
        self._close()

    def _close(self) -> None:
        for fd in self.open:
            os.close(fd)
        self.open = set()


def _child(w: int, job: Job, kwargs: dict[str, Any], sentinel: int | None = None) -> NoReturn:
    """The forked child: run the job, send how it ended, and leave without running the parent's exit code."""
    status = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches both; the parent decides
        outcome = job_outcome(job, kwargs)
        try:
            payload = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - an unpicklable result is reported, not lost
            payload = pickle.dumps(unsendable(e, kwargs))
        data = memoryview(_HEADER.pack(len(payload)) + payload)
        while data:
            data = data[os.write(w, data):]
        finished(sentinel)  # answered: what it wrote is the parent's now
    except BaseException:  # noqa: BLE001 - the parent sees a death without an answer
        status = 70
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(status)  # no atexit handlers, no libhdf5 shutdown: the parent owns those


def _reap(pid: int, grace: float = 5.0) -> int | None:
    """Wait for the child; its exit code, or minus the signal that ended it (as subprocess reports it).

    A child that answered exits at once; one that lingers past ``grace`` seconds is killed.
    """
    end = time.monotonic() + grace
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            end = float("inf")
        time.sleep(0.005)


class _Stuck(Exception):
    """The child, watched (:mod:`refindex.feedback.progress`), sent no pulse for ``limit`` seconds."""

    def __init__(self, limit: float):
        super().__init__(limit)
        self.limit = limit


class _Terminated(BaseException):
    """SIGTERM arrived while the parent waited: stop the child and clean up, then end as SIGTERM would."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """While waiting, turn SIGTERM (when nobody else handles it) into :class:`_Terminated`."""
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
