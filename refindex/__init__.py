"""refindex: index HDF5 files as kerchunk-style reference file systems that zarr reads directly."""

from .api import __version__, info, scan, scan_to_file, scan_to_parquet
from .batch import BatchReport, run_batch
from .errors import NotHDF5Error, RefindexError, SourceError, UnsupportedError, VerifyError
from .reader import open_nwb
from .reader import open as open  # noqa: A004  (refindex.open mirrors zarr.open)
from .scan import ScanOptions
from .schema import CheckReport, check, object_model
from .source import CacheOptions
from .verify import VerifyReport, verify

__all__ = [
    "BatchReport",
    "CacheOptions",
    "CheckReport",
    "NotHDF5Error",
    "RefindexError",
    "ScanOptions",
    "SourceError",
    "UnsupportedError",
    "VerifyError",
    "VerifyReport",
    "__version__",
    "check",
    "info",
    "object_model",
    "open",
    "open_nwb",
    "run_batch",
    "scan",
    "scan_to_file",
    "scan_to_parquet",
    "verify",
]
