"""The bytes of a file: open it (local or remote, the one HDF5 signature probe, its size and
etag/mtime), a read cache for libhdf5's metadata reads, its prefetch, and retries.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`BlockCache`, a read cache shaped for how libhdf5 reads
metadata; :func:`prefetch_tree` batches the scattered structures a tree level at a time.
HTTP(S) requests made a few at a time (an index, a freshness check, a small scan's) go
through :func:`quick_filesystem`, without aiohttp's import.
"""

from ..options import CacheOptions
from ._cache import BlockCache, ReadStats, merge_ranges
from ._failures import WHOLE_FILE_FALLBACK, ranged, reason_of, source_error, whole_file
from ._fingerprint import digest as fingerprint_digest
from ._fingerprint import recorded_spans as fingerprint_spans
from ._fetch import RangeFetcher
from ._http import HTTPStatusError, QuickHTTP
from ._open import HDF5_SIGNATURE, Source, describe, file_info, filesystem_of, has_hdf5_signature, open_source
from ._open import info_with_ranges, one_round_trip, quick_filesystem, stat
from ._prefetch import prefetch_tree
from ._record import INDEX_PREFIX, META, LocalFile, ReadRecorder
from ._retry import RetryPolicy, is_transient, retry_policy, with_retries
from ._validators import described, fine_grained, mtime_epoch, same_mtime

__all__ = ["HDF5_SIGNATURE", "INDEX_PREFIX", "META", "WHOLE_FILE_FALLBACK", "BlockCache", "CacheOptions",
           "HTTPStatusError", "LocalFile", "QuickHTTP", "RangeFetcher", "ReadRecorder", "ReadStats", "RetryPolicy",
           "Source", "describe", "described", "file_info", "filesystem_of", "fine_grained", "fingerprint_digest",
           "fingerprint_spans", "has_hdf5_signature", "info_with_ranges", "is_transient", "merge_ranges",
           "mtime_epoch", "one_round_trip", "open_source", "prefetch_tree", "quick_filesystem", "ranged", "reason_of",
           "retry_policy", "same_mtime", "source_error", "stat", "whole_file", "with_retries"]
