"""The bytes of a file: open it (local or remote, the one HDF5 signature probe, its size and
etag/mtime), a read cache for libhdf5's metadata reads, its prefetch, and retries.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`BlockCache`, a read cache shaped for how libhdf5 reads
metadata; :func:`prefetch_tree` batches the scattered structures a tree level at a time.
"""

from ..options import CacheOptions
from ._cache import BlockCache, ReadStats, merge_ranges
from ._fetch import RangeFetcher
from ._open import HDF5_SIGNATURE, Source, describe, file_info, filesystem_of, has_hdf5_signature, open_source, stat
from ._prefetch import prefetch_tree
from ._record import INDEX_PREFIX, META, LocalFile, ReadRecorder
from ._retry import RetryPolicy, is_transient, retry_policy, with_retries

__all__ = ["HDF5_SIGNATURE", "INDEX_PREFIX", "META", "BlockCache", "CacheOptions", "LocalFile", "RangeFetcher", "ReadRecorder",
           "ReadStats", "RetryPolicy", "Source", "describe", "file_info",
           "filesystem_of", "has_hdf5_signature", "is_transient", "merge_ranges", "open_source", "prefetch_tree",
           "retry_policy", "stat", "with_retries"]
