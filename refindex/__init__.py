"""refindex: index HDF5 files as kerchunk-style reference file systems that zarr reads directly."""

from .api import __version__, info, scan, scan_to_file
from .errors import NotHDF5Error, RefindexError, SourceError, UnsupportedError, VerifyError
from .reader import open_nwb
from .reader import open as open  # noqa: A004  (refindex.open mirrors zarr.open)
from .scan import ScanOptions
from .source import CacheOptions
from .verify import VerifyReport, verify

__all__ = [
    "CacheOptions",
    "NotHDF5Error",
    "RefindexError",
    "ScanOptions",
    "SourceError",
    "UnsupportedError",
    "VerifyError",
    "VerifyReport",
    "__version__",
    "info",
    "open",
    "open_nwb",
    "scan",
    "scan_to_file",
    "verify",
]
