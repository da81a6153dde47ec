"""Names a package re-exports from its modules, imported on first use (PEP 562).

``import refindex`` and refindex's entry points stay light: h5py, zarr and the rest load
with the function that needs them.  A module's objects live as long as the process, so
garbage collection is held while it loads (:mod:`refindex.isolation.gcpause`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from .isolation.gcpause import held_collections


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
