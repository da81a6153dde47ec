"""A guard against the one pattern that hangs the suite: zarr (or fsspec) waiting on its event loop
while this thread holds h5py's global lock.

Inside ``h5py.Group.visititems``/``visit`` (and anywhere else libhdf5 calls back into Python)
the calling thread holds h5py's lock.  A zarr read there hands work to zarr's event-loop thread
and waits for it; when a garbage collection on that thread frees an h5py object, the object's
release waits for the same lock: neither thread moves again.  It happens only now and then (a
collection has to fall there), so it passed review and hung CI for the full test timeout.

:func:`install` (called from ``conftest.py`` for every test process) makes that pattern fail at
once with an error naming it:

- zarr's ``sync`` refuses to run while this thread holds h5py's lock;
- fsspec's ``sync`` refuses to run inside an h5py visit callback (holding the lock is legitimate
  for fsspec elsewhere: libhdf5 reads a remote file through refindex's own file object that way).

Collect names in the callback and read after it returns (``dataset_names`` in conftest).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

MESSAGE = ("{what} was called while this thread holds h5py's lock ({where}): a garbage collection on the "
           "event-loop thread that frees an h5py object would deadlock both threads. Collect names inside "
           "the callback and read after it returns.")

_state = threading.local()
VISITS = ("visit", "visititems", "visit_links", "visititems_links")


class HeldLockRead(RuntimeError):
    """A read through an event loop was attempted where it can deadlock (see the module docstring)."""


def _in_visit() -> bool:
    return getattr(_state, "depth", 0) > 0


def _guard_visit(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def visit(self: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        @functools.wraps(func)
        def callback(*a: Any) -> Any:
            _state.depth = getattr(_state, "depth", 0) + 1
            try:
                return func(*a)
            finally:
                _state.depth -= 1

        return method(self, callback, *args, **kwargs)

    visit.__refindex_guard__ = True  # type: ignore[attr-defined]
    return visit


def _guard_zarr_sync(sync: Callable[..., Any]) -> Callable[..., Any]:
    from h5py._objects import phil

    @functools.wraps(sync)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if phil._is_owned():
            where = ("inside an h5py visit callback" if _in_visit() else
                     "e.g. in a loop over an h5py group's items() or values(), which hold it from item to item")
            raise HeldLockRead(MESSAGE.format(what="zarr", where=where))
        return sync(*args, **kwargs)

    guarded.__refindex_guard__ = True  # type: ignore[attr-defined]
    return guarded


def _guard_fsspec_sync(sync: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(sync)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _in_visit():
            raise HeldLockRead(MESSAGE.format(what="fsspec", where="inside an h5py visit callback"))
        return sync(*args, **kwargs)

    guarded.__refindex_guard__ = True  # type: ignore[attr-defined]
    return guarded


def install() -> None:
    """Patch h5py's visit methods and zarr's and fsspec's ``sync`` (idempotent)."""
    import fsspec.asyn
    import h5py
    import zarr.api.synchronous  # noqa: F401 - the modules that bind ``sync`` by name
    import zarr.core.array  # noqa: F401
    import zarr.core.group  # noqa: F401
    import zarr.core.sync

    for name in VISITS:
        method = getattr(h5py.Group, name, None)
        if method is not None and not getattr(method, "__refindex_guard__", False):
            setattr(h5py.Group, name, _guard_visit(method))
    original = zarr.core.sync.sync
    if not getattr(original, "__refindex_guard__", False):
        guarded = _guard_zarr_sync(original)
        for mod_name, mod in list(sys.modules.items()):
            if (mod_name == "zarr" or mod_name.startswith("zarr.")) and getattr(mod, "sync", None) is original:
                mod.sync = guarded
    if not getattr(fsspec.asyn.sync, "__refindex_guard__", False):
        fsspec.asyn.sync = _guard_fsspec_sync(fsspec.asyn.sync)
