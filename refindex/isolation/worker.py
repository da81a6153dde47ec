"""Run libhdf5 work on untrusted files in a worker process with a time limit.

libhdf5 can crash (segfault, abort) or loop forever on a hostile or damaged file, and
neither can be caught inside the process that runs it.  A :class:`Worker` is a child
process that runs jobs one after another; when it dies, the job becomes a
:class:`WorkerCrashed` error ("libhdf5 crashed (signal N)"), when it overruns its time
limit it is killed and the job becomes :class:`WorkerTimeout` ("timed out after N s").
The next job starts a fresh worker.  Keeping one worker for many jobs avoids paying
process start-up (imports of h5py, numpy, zarr) per file.

Workers are fresh interpreters talking over a pair of pipes: never a fork of a caller
that runs threads (event loops, dask), and unlike multiprocessing's spawn/forkserver they
never re-import the caller's ``__main__``.  A job is a module-level function of
refindex itself, sent by reference (pickle names its module and name; the worker imports
it): ``Worker().run(function, {"arg": value})``.

The command line isolates its one call differently, in a fork of itself made before the
heavy imports (:mod:`refindex.isolation.forked`, milliseconds instead of an interpreter start), and
falls back to a Worker when it cannot fork safely; both speak the messages of
:func:`job_outcome` and raise the same errors.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable

from .. import errors
from ..errors import RefindexError, WorkerCrashed, WorkerTimeout

DEFAULT_TIMEOUT = 600.0  # a job that names no limit (a scan names refindex.options.time_limit_of its file)
# Imported by a new worker before it says READY, so a job's time limit does not pay for them (zarr alone took
# 1.8 s of a first 5 s scan at a load of 12 on 2 cores: every scan asks zarr's metadata for its verdict).
PRELOAD = ("numpy", "h5py", "fsspec", "numcodecs", "zarr")

Job = Callable[..., Any]
Cleanup = Callable[[int], None]  # called with the pid of a worker that died mid-job


def _check_job(job: Job) -> Job:
    """Only refindex's own module-level functions run in a worker."""
    module = getattr(job, "__module__", "") or ""
    if not callable(job) or not (module == "refindex" or module.startswith("refindex.")) or "<" in job.__qualname__:
        raise ValueError(f"not a refindex job: {job!r}")
    return job


def job_outcome(job: Job, kwargs: dict[str, Any]) -> tuple:
    """Run ``job(**kwargs)`` and describe how it ended, as the message a worker sends back.

    ``("ok", result)``, or an error message (:func:`error_message`) that :func:`rebuild_error`
    turns back into the exception.
    """
    try:
        return ("ok", _check_job(job)(**kwargs))
    except RefindexError as e:
        return error_message(e)
    except MemoryError:
        return ("error", "RefindexError", "out of memory (worker memory limit)", kwargs.get("source"),
                None, traceback.format_exc(), False, {})
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        return ("error", "RefindexError", f"{type(e).__name__}: {e}", kwargs.get("source"), None,
                traceback.format_exc(), True, {})


def error_message(e: RefindexError) -> tuple:
    """``("error", class name, reason, file, path, traceback, internal, attributes)`` for a RefindexError.

    ``internal`` flags an exception that is not a RefindexError (a refindex bug rather than
    a bad file); ``attributes`` are the error's other picklable fields (a subclass may have
    its own, and its own ``__init__``), so the parent rebuilds the same error.
    """
    extra = {}
    for name, value in vars(e).items():
        if name not in ("reason", "file", "path", "worker_traceback", "internal"):
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - what cannot travel stays behind
                continue
            extra[name] = value
    trace = "".join(traceback.format_exception(e))
    return ("error", type(e).__name__, e.reason, e.file, e.path, trace, False, extra)


def unsendable(e: Exception, kwargs: dict[str, Any]) -> tuple:
    """The message that replaces a result which cannot be pickled (or is too big to send)."""
    return ("error", "RefindexError", f"cannot return the result: {type(e).__name__}: {e}",
            kwargs.get("source"), None, traceback.format_exc(), True, {})


def _serve(conn, memory_limit: int | None) -> None:
    """Worker main loop: run (job, kwargs) messages until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    if memory_limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    while True:
        try:
            job, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        result = job_outcome(job, kwargs)
        try:
            conn.send(result)
        except Exception as e:  # result not picklable / too big: report that instead
            conn.send(unsendable(e, kwargs))


def rebuild_error(name: str, reason: str, file: str | None, path: str | None, trace: str,
                  internal: bool = False, attributes: dict[str, Any] | None = None) -> RefindexError:
    """The exception an error message (:func:`error_message`) describes: same class, message and fields.

    Built without calling the class's own ``__init__``, whose signature a subclass may change.
    """
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, RefindexError)):
        cls = RefindexError
    err = cls.__new__(cls)
    vars(err).update(attributes or {})
    RefindexError.__init__(err, reason, file=file, path=path)
    err.worker_traceback = trace  # shown by ``refindex --debug``
    err.internal = internal
    return err


def signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def death_error(code: int | None, label: str | None, printed: str = "") -> WorkerCrashed:
    """The error for a worker that ended before answering: ``code`` < 0 is the signal that killed it.

    A worker that exits by itself never does so mid-job: some library it ran ended the
    process (an HDF5 filter plugin calling ``exit(0)`` on a chunk it cannot decode, seen
    with the SZ plugin).  ``printed``: what the worker wrote last, kept in the reason.
    """
    if code is not None and code < 0:
        return WorkerCrashed(f"libhdf5 crashed (signal {-code}, {signal_name(-code)})", file=label)
    how = "exit status unknown" if code is None else f"exit code {code}"
    reason = f"the worker ended without an answer ({how}): a library it ran (an HDF5 filter plugin?) ended the process"
    last = [line.strip() for line in printed.splitlines() if line.strip()]
    if last:
        reason += f"; it printed last: {last[-1][:200]!r}"
    return WorkerCrashed(reason, file=label)


def timeout_error(timeout: float | None, label: str | None) -> WorkerTimeout:
    return WorkerTimeout(f"timed out after {timeout:g} s (worker killed)", file=label)


def stall_error(limit: float, label: str | None) -> WorkerTimeout:
    return WorkerTimeout(f"no progress for {limit:g} s: libhdf5 held the worker in one call while it read the file, "
                         "as it does when it loops on a damaged file (worker killed)", file=label)


class StallWatch:
    """The parent's reading of a worker's pulses (:mod:`refindex.feedback.progress`): each line is "still here,
    stall limit N s" (0: not watched).  :meth:`deadline` is when a watched worker counts as stuck."""

    def __init__(self) -> None:
        self.limit = 0.0
        self.last = time.monotonic()
        self._partial = b""

    def feed(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        if lines:
            try:
                self.limit = float(lines[-1])
            except ValueError:
                return
            self.last = time.monotonic()

    def deadline(self) -> float:
        return self.last + self.limit if self.limit > 0 else math.inf


def pulse_sender(fd: int) -> Callable[[float], None]:
    """The worker's side of the pulse pipe ``fd``: a :func:`refindex.feedback.progress.set_watcher` callable."""
    os.set_blocking(fd, False)

    def send(limit: float) -> None:
        try:
            os.write(fd, b"%g\n" % limit)
        except OSError:  # a full pipe (the parent reads when it waits) or a closed one: the next pulse goes
            pass

    return send


def drain(fd: int) -> None:
    """Read away what a pipe holds (pulses of an earlier job)."""
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        while os.read(fd, 1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, blocking)


READY = ("ready",)  # a worker's first message, once it can take jobs
START_LIMIT = 120.0  # seconds a worker may take to import what it preloads


class Worker:
    """A reusable worker process; ``run`` is serialised (one job at a time)."""

    def __init__(self, *, memory_limit: int | None = None):
        self.memory_limit = memory_limit
        self._proc = None
        self._conn = None
        self._lock = threading.Lock()
        self.started = 0  # processes started so far (restarts after crash/timeout included)
        self._fresh = False  # started, and its READY not read yet

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> None:
        from multiprocessing.connection import Connection

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        pulse_r, pulse_w = os.pipe()
        cmd = [sys.executable, "-c", "import sys; from refindex.isolation.worker import worker_main; worker_main(sys.argv[1:])",
               str(to_child_r), str(from_child_w), str(self.memory_limit or 0), str(pulse_w)]
        try:
            proc = subprocess.Popen(cmd, pass_fds=(to_child_r, from_child_w, pulse_w), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
            os.close(pulse_w)
        self._proc = proc
        self._conn = _Duplex(Connection(from_child_r, writable=False), Connection(to_child_w, readable=False),
                             Connection(pulse_r, writable=False))
        self.started += 1
        self._fresh = True

    def _await_ready(self, label: str | None) -> None:
        """Wait for a fresh worker's READY, sent once its heavy imports are done: a job's time limit counts
        the job, not an interpreter starting on a busy machine (which took over 4 s at a load of 11 on 2 cores)."""
        stuck = self._conn.wait_answer(START_LIMIT, label)
        if stuck is not None:
            raise WorkerTimeout(f"the worker process did not start within {START_LIMIT:g} s", file=label)
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            raise death_error(self._kill(), label) from None
        if msg != READY:
            raise WorkerCrashed(f"the worker process started with {msg!r} instead of {READY!r}", file=label)
        self._fresh = False

    def start(self) -> "Worker":
        """Start the process now (its interpreter and imports) instead of on the first job: a batch starts its
        workers while it still asks the store which files changed."""
        with self._lock:
            self._running()
        return self

    def _running(self) -> None:
        """A live process (a new one if there is none or it died); the caller holds the lock."""
        if not self._alive():
            self._kill()
            self._start()

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _kill(self) -> int | None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.wait(0.5)  # a crashing worker may still be dumping core
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait(10)

    def close(self) -> None:
        """Stop the worker (it exits when its pipe closes; killed if it does not)."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def run(self, job: Job, kwargs: dict[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT,
            label: str | None = None, cleanup: Cleanup | None = None) -> Any:
        """Run ``job(**kwargs)`` (a module-level refindex function) in the worker.

        Returns its result, re-raises its RefindexError, or raises WorkerCrashed /
        WorkerTimeout (the worker is then replaced on the next call).  ``cleanup(pid)``
        runs after the worker died or was killed in the middle of the job (to remove
        what that process left half-written).
        """
        label = label or (str(kwargs.get("source")) if kwargs.get("source") is not None else None)
        _check_job(job)
        with self._lock:
            self._running()
            pid = self._proc.pid
            try:
                if self._fresh:
                    self._await_ready(label)
                drain(self._conn.pulses.fileno())
                self._conn.send((job, kwargs))
                stuck = self._conn.wait_answer(timeout, label)
                if stuck is not None:
                    self._kill()
                    raise stuck
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    raise death_error(self._kill(), label) from None
            except BaseException:
                self._kill()
                if cleanup is not None:
                    cleanup(pid)
                raise
        if msg[0] == "ok":
            return msg[1]
        raise rebuild_error(*msg[1:])


_IDLE: dict[tuple, list[Worker]] = {}
_IDLE_LOCK = threading.Lock()
KEPT_IDLE = 2  # warm workers kept per working folder and environment


def run_isolated(job: Job, kwargs: dict[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT,
                 label: str | None = None, cleanup: Cleanup | None = None) -> Any:
    """:meth:`Worker.run` in a warm worker of this process when one is idle, else a new one.

    One isolated call after another (the API's ``isolate=True``, the command line run from
    Python) then pays a worker's start-up (an interpreter and its imports) once, as batch
    workers do.  A worker is only reused from the same working folder and environment it was
    started in (relative paths and variables such as ``REFINDEX_CACHE_DIR`` mean the same);
    one that crashed or was killed is replaced by :meth:`Worker.run` itself.
    """
    key = (os.getcwd(), tuple(sorted(os.environ.items())))
    with _IDLE_LOCK:
        idle = _IDLE.get(key) or []
        worker = idle.pop() if idle else None
    if worker is None:
        worker = Worker()
    try:
        return worker.run(job, kwargs, timeout=timeout, label=label, cleanup=cleanup)
    finally:
        with _IDLE_LOCK:
            kept = _IDLE.setdefault(key, [])
            if len(kept) < KEPT_IDLE and len(_IDLE) <= 4:
                kept.append(worker)
                worker = None
        if worker is not None:
            worker.close()


@atexit.register
def _close_idle() -> None:
    with _IDLE_LOCK:
        workers = [w for kept in _IDLE.values() for w in kept]
        _IDLE.clear()
    for w in workers:
        w.close()


class _Duplex:
    """Two one-way pipe connections used as one, and the worker's pulses (:class:`StallWatch`)."""

    def __init__(self, r, w, pulses=None):
        self.r, self.w, self.pulses = r, w, pulses

    def wait_answer(self, timeout: float | None, label: str | None) -> WorkerTimeout | None:
        """Wait until the answer (or the end of the pipe) is there: None; or the error for a worker past
        its time limit, or watched and without a pulse for its stall limit."""
        from multiprocessing.connection import wait

        end = time.monotonic() + timeout if timeout is not None else math.inf
        watch, sources = StallWatch(), [self.r] + ([self.pulses] if self.pulses is not None else [])
        while True:
            until = min(end, watch.deadline())
            left = until - time.monotonic()
            if left <= 0:
                return timeout_error(timeout, label) if until >= end else stall_error(watch.limit, label)
            ready = wait(sources, None if left == math.inf else left)
            if self.r in ready:
                return None
            if self.pulses in ready:
                try:
                    data = os.read(self.pulses.fileno(), 1 << 16)
                except BlockingIOError:
                    continue
                if not data:  # the worker closed it (it is ending): the answer pipe tells how
                    sources.remove(self.pulses)
                watch.feed(data)

    def send(self, obj: Any) -> None:
        self.w.send(obj)

    def recv(self) -> Any:
        return self.r.recv()

    def poll(self, timeout: float | None) -> bool:
        return self.r.poll(timeout)

    def close(self) -> None:
        self.r.close()
        self.w.close()
        if self.pulses is not None:
            self.pulses.close()


def worker_main(argv: list[str]) -> None:
    """The worker process: serve jobs over the two pipes named in ``argv`` until they close."""
    from multiprocessing.connection import Connection

    import importlib

    r, w, limit = int(argv[0]), int(argv[1]), int(argv[2])
    if len(argv) > 3:
        from ..feedback.progress import set_watcher

        set_watcher(pulse_sender(int(argv[3])))
    for name in PRELOAD:  # pay the heavy imports once, before the first job
        importlib.import_module(name)

    conn = _Duplex(Connection(r, writable=False), Connection(w, readable=False))
    conn.send(READY)  # the parent starts a job's clock from here, not from the interpreter's start
    _serve(conn, limit or None)
