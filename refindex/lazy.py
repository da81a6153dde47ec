"""Names a package re-exports from its modules, imported on first use (PEP 562).

``import refindex`` and refindex's entry points stay light: h5py, zarr and the rest load
with the function that needs them.  A module's objects live as long as the process, so
garbage collection is held while it loads (:mod:`refindex.isolation.gcpause`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any, Callable

from .isolation.gcpause import held_collections

_PACKAGE = (os.path.dirname(os.path.abspath(__file__)),)  # a warning names the first caller outside refindex


def attribute_loader(package: str, where: dict[str, str],
                     renamed: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving ``where[name]``'s attribute ``name`` (module relative to ``package``).

    ``"module:attribute"`` names the attribute under another name; ``"module:"`` is the
    submodule itself.  ``renamed``: former names (not in ``__all__``) of the package's names,
    given with a DeprecationWarning.
    """

    def __getattr__(name: str) -> Any:
        if renamed and name in renamed:
            warnings.warn(f"{package}.{name} is now {package}.{renamed[name]}", DeprecationWarning,
                          skip_file_prefixes=_PACKAGE)
            return getattr(importlib.import_module(package), renamed[name])
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        with held_collections():  # a module's objects live as long as the process
            found = importlib.import_module(f"{package}.{module}")
        value = found if where[name].endswith(":") else getattr(found, attribute or name)
        setattr(importlib.import_module(package), name, value)  # found directly from now on
        return value

    return __getattr__
