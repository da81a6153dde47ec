"""When refindex holds CPython's garbage collection, and why.

1. While an index is opened (``h5py_file``, ``open_nwb``'s h5py road, refindex's modules
   loaded on first use): what that allocates (modules, the index, its pages) lives as long
   as the process or the file, so the collections its allocations trigger free nothing; yet
   they advance the generation counters, and in a process with a large heap (pynwb's imports
   leave about 10^5 objects) they pushed the full collection that follows (0.05-0.1 s) into
   the caller's next steps: pynwb's read after ``refindex.h5py_file`` (docs/h5py.md).
2. While libhdf5 waits for bytes that other threads fetch (a remote scan's reads, the h5py
   road's): libhdf5 calls a file object with h5py's global lock held, and a collection that
   starts in a fetching thread (fsspec's event loop, refindex's HTTP threads) and finds an
   h5py object among the garbage needs that lock to free it; the waiting thread and the
   fetching one then wait for each other for ever (h5py issue 2019, its docs on file-like
   objects).  Held for the wait, no collection can start in the fetching thread.

3. Holding is not enough for an open: CPython counts every object that survives a young
   collection toward its next full one (due when they reach a quarter of the objects it
   kept last time), so an open's long-lived objects still brought that collection forward,
   into pynwb's read: a full collection of 55-75 ms in every P4 open of the few-object file
   through ``h5py_file``, none in the local open (docs/h5py.md).  At the end of an
   open, :func:`held_for_open` moves the young objects into the oldest generation without
   counting them (``gc.freeze()`` then ``gc.unfreeze()``): the full collection comes when
   the caller's own objects make it due.  (Not when the caller froze objects of their own:
   unfreezing would release theirs.  The few the interpreter keeps frozen at start-up, the
   tuples of its built-in types, end in the oldest generation: immortal, they are never freed.)

:func:`held_collections` holds it for a stretch of this thread; :func:`collections_allowed`
lets it run again inside one, for work that makes garbage (a scan on the fly);
:func:`held_for_open` holds it for an open and keeps what the open made as old objects.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Callable, TypeVar

F = TypeVar("F", Future, list[Future])  # what a fetch started: its future, or one per range

_LOCK = threading.Lock()
_COUNT = 0  # holds in force, in every thread
_OURS = False  # collection was on when the first of them began: the last one turns it back on
_MINE = threading.local()  # .n: this thread's holds
SETTLE = 0.25  # seconds a fetch's hold outlasts it
# objects the interpreter itself keeps frozen (CPython 3.12: 375 tuples of its built-in types); more are
# the caller's (a server that froze its start-up heap before forking, thousands): held_for_open leaves them
_FROZEN_AT_START = gc.get_freeze_count() if gc.get_freeze_count() < 2000 else 0


def _take(n: int) -> None:
    global _COUNT, _OURS
    with _LOCK:
        if _COUNT == 0 and n:
            _OURS = gc.isenabled()
            gc.disable()
        _COUNT += n


def _give(n: int) -> None:
    global _COUNT, _OURS
    with _LOCK:
        _COUNT -= n
        if _COUNT == 0 and n and _OURS:
            _OURS = False
            gc.enable()


@contextmanager
def held_collections() -> Iterator[None]:
    """No garbage collection inside; back on when the last hold of the process ends, if it was on
    when the first began (a caller who turned it off keeps it off).  Holds nest, across threads."""
    _take(1)
    _MINE.n = getattr(_MINE, "n", 0) + 1
    try:
        yield
    finally:
        _MINE.n -= 1
        _give(1)


@contextmanager
def held_for_open() -> Iterator[None]:
    """:func:`held_collections` around an open whose objects live as long as what it opens; when the
    outermost of this thread's holds ends, the young objects join the oldest generation without a
    collection (3. above), whether or not another thread's hold (a fetch) still keeps collection off."""
    with held_collections():
        yield
    if not getattr(_MINE, "n", 0) and gc.get_freeze_count() <= _FROZEN_AT_START:
        gc.freeze()
        gc.unfreeze()


@contextmanager
def collections_allowed() -> Iterator[None]:
    """This thread's holds lifted inside (collection runs again unless another thread holds it)."""
    n = getattr(_MINE, "n", 0)
    if not n:
        yield
        return
    _MINE.n = 0
    _give(n)
    try:
        yield
    finally:
        _take(n)
        _MINE.n = n


def held_while_fetching(start: Callable[..., F], *args: Any) -> F:
    """``start(*args)``: a fetch that runs in other threads (its future, or a list of them), with
    collection held until it is done (libhdf5 may ask for its bytes at any moment, with h5py's
    lock held).  Let go :data:`SETTLE` seconds later from a timer thread: the threads that
    completed the fetch (fsspec's event loop, a pool's) still run their own bookkeeping after it,
    and a collection starting there then could be what libhdf5's next wait waits for."""
    _take(1)
    try:
        started = start(*args)
    except BaseException:
        _give(1)
        raise
    futures: list[Future] = started if isinstance(started, list) else [started]
    left = [len(futures)]
    lock = threading.Lock()

    def done(_: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        try:
            timer = threading.Timer(SETTLE, _give, (1,))
            timer.daemon = True
            timer.start()
        except RuntimeError:  # the interpreter is shutting down
            _give(1)

    if not futures:
        _give(1)
    for future in futures:
        future.add_done_callback(done)
    return started


def _after_fork() -> None:
    """A forked child has only the thread that forked: the holds of the others (fetching threads)
    end with them; its own are let go as its blocks end."""
    global _COUNT, _OURS, _LOCK
    _LOCK = threading.Lock()  # another thread may have held it at the fork
    _COUNT = getattr(_MINE, "n", 0)
    if not _COUNT and _OURS:
        _OURS = False
        gc.enable()


os.register_at_fork(after_in_child=_after_fork)
