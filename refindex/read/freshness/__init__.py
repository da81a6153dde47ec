"""Freshness: an index is never read against a source that changed since it was made.

An index stores byte offsets into its source.  If the source is rewritten, those offsets
point at other bytes and reading through the index returns wrong values without an error.
So every index records its source's provenance (``refs["refindex"]["source"]``: ``url``,
``size``, the validators the store gives — ``etag``, ``version``, ``mtime`` — and a content
``fingerprint`` of the bytes it depends on), and every reader asks :func:`check_fresh`
before it serves a byte: saved indexes (JSON, parquet), the cache of indexes made on the
fly, batch re-runs, Icechunk commits, h5py-style readers.

:func:`check_fresh` (provenance dict, storage options) raises
:class:`~refindex.errors.StaleIndexError` or returns a :class:`Freshness` (what proved it,
the source's info now, the bytes it fetched).  :func:`check_source` is the same for a
whole index (a refs dict, or an Icechunk index's record).  docs/freshness.md tells users.
"""

from ._check import Freshness, check_fresh
from ._provenance import check_source, recorded_source
from ._verdict import Verdict, needs_bytes_first, verdict

__all__ = ["Freshness", "Verdict", "check_fresh", "check_source", "needs_bytes_first", "recorded_source", "verdict"]
