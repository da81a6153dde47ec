"""HDF5 -> the neutral model: walk a file with h5py and describe every group, dataset and link.

The scan reads metadata only, except where the index must carry values inline:
variable-length data, references, compact datasets, chunks written with filters
skipped, data behind filters no zarr codec can run, and small chunks and datasets.
Every dataset either gets an exact representation or raises
:class:`~refindex.errors.UnsupportedError` (recorded instead when ``on_unsupported="skip"``).

One :class:`ScanContext` per file holds what a scan shares; the walk (``_walk``), the
attributes (``_attrs``), each storage layout (``_chunked``, ``_contiguous``, ``_virtual``,
``_inline``) and the checks against libhdf5's reads (``_checks``) are functions over it.
"""

from ._attrs import unsafe_type
from ._chunked import BULK_INLINE
from ._chunkiter import GRID_PREALLOCATE, chunk_table
from ._context import ScanContext
from ._pages import choose_pages
from ._tables import Runs, chunk_runs
from ._walk import scan_file

__all__ = ["BULK_INLINE", "GRID_PREALLOCATE", "Runs", "ScanContext", "choose_pages", "chunk_runs", "chunk_table", "scan_file",
           "unsafe_type"]
