"""The bytes of a file: open it (local or remote, the one HDF5 signature probe, its size and
etag/mtime), a read cache for libhdf5's metadata reads, its prefetch, and retries.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`BlockCache`, a read cache shaped for how libhdf5 reads
metadata; :func:`prefetch_tree` batches the scattered structures a tree level at a time.
HTTP(S) requests made a few at a time (an index, a freshness check, a small scan's) go
through :func:`quick_filesystem`, without aiohttp's import.
"""

from ..lazy import attribute_loader

# Loaded on first use: fetching an index needs ``_quick`` and ``_http`` alone, and an open starts
# that request before it loads the block cache, the prefetch and the rest.
_WHERE = {
    "FetchOptions": "_open",
    "BlockCache": "_cache", "FetchInFork": "_cache", "ReadStats": "_cache", "held_bytes": "_cache",
    "merge_ranges": "_cache",
    "WHOLE_FILE_FALLBACK": "_failures", "ranged": "_failures", "reason_of": "_failures", "source_error": "_failures",
    "whole_file": "_failures",
    "fingerprint_digest": "_fingerprint:digest", "fingerprint_spans": "_fingerprint:recorded_spans",
    "RangeFetcher": "_fetch", "split_ranges": "_fetch", "MAX_PARTS": "_fetch",
    "HTTPStatusError": "_http", "QuickHTTP": "_http", "honours": "_http",
    "HDF5_SIGNATURE": "_open", "Source": "_open", "describe": "_open", "file_info": "_open",
    "has_hdf5_signature": "_open", "open_source": "_open", "info_with_ranges": "_open", "one_round_trip": "_open",
    "scan_ahead": "_open", "stat": "_open",
    "filesystem_of": "_quick", "in_thread": "_quick", "quick_filesystem": "_quick", "put_ahead": "_quick",
    "read_whole": "_quick", "request_ahead": "_quick",
    "retried_in_thread": "_quick", "taken_ahead": "_quick",
    "prefetch_tree": "_prefetch", "TreeSeen": "_prefetch", "reads_other_files": "_prefetch",
    "INDEX_PREFIX": "_record", "META": "_record", "LocalFile": "_record", "ReadRecorder": "_record",
    "ReadOnlyFile": "_readonly",
    "RetryPolicy": "_retry", "is_transient": "_retry", "retry_policy": "_retry", "with_retries": "_retry",
    "content_etag": "_validators", "described": "_validators", "etag_follows_content": "_validators",
    "fine_grained": "_validators", "mtime_epoch": "_validators", "same_mtime": "_validators",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE, renamed={"CacheOptions": "FetchOptions"})
