"""Names a package re-exports from its modules, imported on first use (PEP 562), with garbage
collection held while they load.

``import refindex`` and refindex's entry points stay light: h5py, zarr and the rest load
with the function that needs them.  What a first use allocates (modules, an index, its
pages) lives as long as the process or the file: CPython's collections triggered by those
allocations free nothing, yet they advance its generation counters, and in a process with a
large heap (pynwb's imports leave about 10^5 objects) they pushed the full collection that
follows (0.05-0.1 s) into the caller's next steps: pynwb's read after
``refindex.h5py_file`` (docs/h5py.md).  :func:`held_collections` defers them for such a
short, allocation-only stretch; :func:`collections_allowed` lets them run again inside it
for work that makes garbage (a scan).
"""

from __future__ import annotations

import gc
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

_STATE = threading.local()  # .held: this thread turned collection off (and turns it back on)


@contextmanager
def held_collections() -> Iterator[None]:
    """No garbage collection inside (unless another part of the process turns it on); back on after,
    if it was on before.  Nested holds are one hold."""
    if getattr(_STATE, "held", False) or not gc.isenabled():
        yield
        return
    gc.disable()
    _STATE.held = True
    try:
        yield
    finally:
        _STATE.held = False
        gc.enable()


@contextmanager
def collections_allowed() -> Iterator[None]:
    """Garbage collection on again inside a hold of this thread (nothing changes outside one)."""
    if not getattr(_STATE, "held", False):
        yield
        return
    _STATE.held = False
    gc.enable()
    try:
        yield
    finally:
        gc.disable()
        _STATE.held = True


def attribute_loader(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving ``where[name]``'s attribute ``name`` (module relative to ``package``).

    ``"module:attribute"`` names the attribute under another name; ``"module:"`` is the
    submodule itself.
    """

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        with held_collections():  # a module's objects live as long as the process
            found = importlib.import_module(f"{package}.{module}")
        value = found if where[name].endswith(":") else getattr(found, attribute or name)
        setattr(importlib.import_module(package), name, value)  # found directly from now on
        return value

    return __getattr__
