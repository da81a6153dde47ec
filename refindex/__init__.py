"""refindex: index HDF5 files as kerchunk-style reference file systems that zarr reads directly.

The public names load on first use, so ``import refindex`` (and ``refindex --help``)
costs no more than the interpreter start; h5py, zarr, pyarrow and the rest come in with
the function that needs them.
"""

from __future__ import annotations

from .errors import (GroupNotFound, NotHDF5Error, RefindexError, RefindexWarning, SourceError, StaleIndexError,
                     UnsupportedError, UntrustedReference, VerifyError)
from .lazy import attribute_loader
from .options import FetchOptions, ScanOptions

__version__ = "0.1.0"

_WHERE = {
    "scan": "api", "scan_to_file": "api", "scan_to_parquet": "api", "scan_to_icechunk": "api",
    "open": "read", "open_nwb": "read", "h5py_file": "read", "info": "read", "verify": "read", "check": "read", "object_model": "read",
    "CheckReport": "read", "VerifyReport": "read", "ReadOptions": "read",
    "run_batch": "batch", "BatchReport": "batch",
    "read": "read:",  # the read side's other names (refindex.read.cache_folder(), .IndexStore ...), as documented
}

__all__ = ["BatchReport", "CheckReport", "FetchOptions", "GroupNotFound", "NotHDF5Error", "ReadOptions", "RefindexError", "RefindexWarning", "ScanOptions",
           "SourceError", "StaleIndexError", "UnsupportedError", "UntrustedReference", "VerifyError", "VerifyReport", "__version__", "check",
           "h5py_file", "info", "object_model", "open", "open_nwb", "run_batch", "scan", "scan_to_file", "scan_to_icechunk", "scan_to_parquet",
           "verify"]


__getattr__ = attribute_loader(__name__, _WHERE, renamed={"CacheOptions": "FetchOptions"})
