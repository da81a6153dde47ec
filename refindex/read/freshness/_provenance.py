"""The provenance an index records of its source, and the check of a whole index against it."""

from __future__ import annotations

from typing import Any, Sequence

from ._check import Freshness, Span, check_fresh

CHECKED_FIELDS = ("size", "etag", "version", "mtime", "fingerprint")


def recorded_source(refs: Any) -> dict[str, Any] | None:
    """The ``source`` provenance of an index dict (or of ``{"refindex": record}``), or None when it has none."""
    if not isinstance(refs, dict):
        return None
    src = (refs.get("refindex") or {}).get("source")
    if not isinstance(src, dict) or not src.get("url") or not any(k in src for k in CHECKED_FIELDS):
        return None
    return src


def check_source(refs: Any, *, source: str | None = None, storage_options: dict[str, Any] | None = None,
                 also: Sequence[Span] = ()) -> Freshness | None:
    """Raise :class:`~refindex.errors.StaleIndexError` if the source of ``refs`` changed since it was indexed.

    ``source``: where to look (default: the URL the index points at; another copy of the
    file must have the same size and bytes).  None (nothing checked) for indexes without
    provenance (made by other tools).  ``also``: byte ranges to read in the same round trip
    (:attr:`Freshness.fetched`).
    """
    recorded = recorded_source(refs)
    if recorded is None:
        return None
    return check_fresh(recorded, storage_options, url=None if source is None else str(source), also=also)
