"""Stale-index detection.

An index stores byte offsets into its source.  If the source is rewritten, those
offsets silently point at other bytes, so reading through a stale index returns
wrong values without any error.  Each index records the source's size, and its etag
and/or mtime when the store reports them (``refs["refindex"]["source"]``); before
reading, one ``fs.info`` call compares them with the source as it is now.
Indexes without provenance (made by other tools) are not checked.
"""

from __future__ import annotations

from typing import Any

from .. import urls
from ..errors import StaleIndexError
from ..source import stat

CHECKED_FIELDS = ("size", "etag", "mtime")


def recorded_source(refs: Any) -> dict[str, Any] | None:
    """The ``source`` provenance of an index dict, or None when it has none."""
    if not isinstance(refs, dict):
        return None
    src = (refs.get("refindex") or {}).get("source")
    if not isinstance(src, dict) or not src.get("url") or not any(k in src for k in CHECKED_FIELDS):
        return None
    return src


def differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Human-readable mismatches between recorded provenance and the current source."""
    out = []
    for key in CHECKED_FIELDS:
        if key in recorded and key in now and recorded[key] != now[key]:
            out.append(f"{key} {recorded[key]!r} -> {now[key]!r}")
    return out


def check_source(refs: Any, *, source: str | None = None, storage_options: dict[str, Any] | None = None) -> None:
    """Raise :class:`StaleIndexError` if the source of ``refs`` changed since it was indexed.

    ``source``: where to look (default: the URL the index points at).  A no-op for
    indexes without provenance.
    """
    recorded = recorded_source(refs)
    if recorded is None:
        return
    url = urls.normalise(str(source) if source is not None else recorded["url"])
    now = stat(url, storage_options)
    if url != recorded["url"]:
        # Another copy of the source (e.g. verifying a local copy of a published file):
        # its etag/mtime are its own, only the size must agree.
        recorded = {"size": recorded["size"]} if "size" in recorded else {}
    diff = differences(recorded, now)
    if diff:
        raise StaleIndexError(
            "source changed since it was indexed (" + "; ".join(diff) + "): re-scan it, or pass "
            "check_source=False / --no-check-source to read anyway", file=url)


def notes(index: Any, path: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """refindex's own attributes of node ``path`` ("a/b", "" for the root) of a plain index, e.g.
    ``refindex_view_dtype`` (the numpy type to view long doubles' raw bytes as), ``refindex_inlined``
    (why values were copied in), ``refindex_enum`` (an enum's labels), ``zarr_link`` (links kept as
    entries).  A plain index keeps them in its provenance (``hidden_attributes``), out of the zarr
    attributes xarray shows; an HDMF index keeps them in the node's attributes (empty here).

    ``index``: a refs dict, a JSON index or a parquet folder (path or URL).
    """
    from ..conventions import hidden_attributes
    from ._load import load_refs, parquet_metadata

    refs = load_refs(index, storage_options)
    prov = (refs if isinstance(refs, dict) else parquet_metadata(refs, storage_options)).get("refindex") or {}
    return hidden_attributes(prov, "/" + str(path).strip("/"))
