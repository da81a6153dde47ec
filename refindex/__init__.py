"""refindex: index HDF5 files as kerchunk-style reference file systems that zarr reads directly.

The public names load on first use, so ``import refindex`` (and ``refindex --help``)
costs no more than the interpreter start; h5py, zarr, pyarrow and the rest come in with
the function that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import NotHDF5Error, RefindexError, SourceError, StaleIndexError, UnsupportedError, VerifyError
from .options import CacheOptions, ScanOptions

__version__ = "0.1.0"

_WHERE = {
    "scan": "api", "scan_to_file": "api", "scan_to_parquet": "api",
    "open": "read", "open_nwb": "read", "info": "read", "verify": "read", "check": "read", "object_model": "read",
    "CheckReport": "read", "VerifyReport": "read", "ReadOptions": "read",
    "run_batch": "batch", "BatchReport": "batch",
}

__all__ = ["BatchReport", "CacheOptions", "CheckReport", "NotHDF5Error", "ReadOptions", "RefindexError", "ScanOptions",
           "SourceError", "StaleIndexError", "UnsupportedError", "VerifyError", "VerifyReport", "__version__", "check",
           "info", "object_model", "open", "open_nwb", "run_batch", "scan", "scan_to_file", "scan_to_parquet",
           "verify"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
