"""Loading what a user hands to ``open``, ``open_nwb``, ``info``, ``verify`` or ``schema``: an index
(JSON file, parquet folder, dict), or the HDF5 file itself.

An index (JSON file, parquet folder, or a dict) is read as it is.  An HDF5 file or URL
is scanned on the fly, and the index kept in a local cache keyed by the file's URL,
size and etag/mtime (one ``info`` call), so opening it again in a later session costs
that freshness check instead of a scan.  Anything else is refused with an error that
says what it is.

The cache lives in ``$REFINDEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/refindex``, else
``~/.cache/refindex``; ``REFINDEX_CACHE_DIR=off`` or ``cache=False`` turns it off.
Entries are whole JSON indexes written atomically; deleting the folder is always safe.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from ... import urls
from ...errors import RefindexError, SourceError
from ...model import ZMETADATA, RefsDocument
from ...options import ScanOptions
from ...source import describe, has_hdf5_signature, quick_filesystem, read_whole, source_error
from ._names import CacheSetting, IndexCache, Kind, kind_by_name


def kind_of(target: str, storage_options: dict[str, Any] | None = None) -> Kind:
    """Is ``target`` a JSON index, a parquet index folder or an HDF5 file?

    Decided by the name where it says (``.json``, ``.nwb``, ``.h5``...), else by the first
    bytes (one small read); a folder is a parquet index when it holds ``.zmetadata``.
    """
    named = kind_by_name(target)
    if named is not None:
        return named
    fs, path = quick_filesystem(target, storage_options)
    try:
        if urls.is_local(target):
            if os.path.isdir(path):
                if os.path.exists(os.path.join(path, ".zmetadata")):
                    return "parquet"
                raise RefindexError("a folder that is not a parquet index (no .zmetadata)", file=target)
        head = fs.cat_file(path, start=0, end=64)
    except FileNotFoundError as e:
        if _exists(fs, path.rstrip("/") + "/.zmetadata"):
            return "parquet"
        raise SourceError("file not found", file=target) from e
    except IsADirectoryError:
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "json"
    if head[:8] == b"\x89HDF\r\n\x1a\n":
        return "hdf5"
    size = fs.size(path)
    if has_hdf5_signature(lambda off, n: head[off:off + n] if off + n <= len(head) else fs.cat_file(
            path, start=off, end=off + n), size):
        return "hdf5"
    raise RefindexError(f"neither a reference index (JSON or parquet) nor an HDF5 file: {describe(head)}",
                        file=target)


def _exists(fs: Any, path: str) -> bool:
    try:
        return bool(fs.exists(path))
    except Exception:
        return False


def index_of_file(url: str, *, storage_options: dict[str, Any] | None = None, cache: CacheSetting = True,
                  options: ScanOptions | None = None, accept: Callable[[RefsDocument], None] | None = None
                  ) -> RefsDocument:
    """The index of the HDF5 file ``url``: from the cache when the file is unchanged, else scanned now.

    An entry is keyed by the file's URL, refindex's version and the scan options; the file's
    freshness is then checked against the entry's own provenance (:func:`~refindex.read.freshness.check_fresh`:
    validators, else the content fingerprint), so a changed file is scanned again even when
    its server sends no validator, and a re-upload of the same bytes is not.  ``accept(refs)``
    may refuse an index (raising) before it is cached.
    """
    from ...isolation.gcpause import collections_allowed
    from ...pipeline import scan_refs

    options = (options or ScanOptions()).but(storage_options=dict(storage_options or {}))
    cache = IndexCache.of(cache)
    if cache.folder is None:
        with collections_allowed():  # a scan makes garbage (refindex.isolation.gcpause)
            refs = scan_refs(url, options, progress="auto")
        if accept is not None:
            accept(refs)
        return refs
    where = urls.normalise(url)
    entry = cache.entry(where, options)
    refs = _cached_entry(entry, storage_options)
    if refs is None:
        with collections_allowed():  # a scan makes garbage (refindex.isolation.gcpause)
            refs = scan_refs(where, options, progress="auto")  # a bar in a notebook when it takes seconds
        if accept is not None:
            accept(refs)
        keep_in_cache(refs, entry)
    elif accept is not None:
        accept(refs)
    return refs


def _cached_entry(entry: Path, storage_options: dict[str, Any] | None) -> RefsDocument | None:
    """The cached index in ``entry`` if its source is unchanged (None: missing, damaged or stale).

    When the source's validators changed but its bytes did not (a re-upload), the entry is
    kept with the new validators, so the next open settles it without reading bytes.
    """
    from ...errors import StaleIndexError
    from ..freshness import check_fresh, recorded_source

    try:
        refs = json.loads(entry.read_bytes())
    except (OSError, ValueError):
        return None  # missing, or damaged: scanned again and replaced
    recorded = recorded_source(refs)
    if recorded is None:
        return None
    try:
        found = check_fresh(recorded, storage_options)
    except StaleIndexError:
        return None
    if found.how == "fingerprint" and any(recorded.get(k) != found.now.get(k) for k in ("etag", "version", "mtime")):
        recorded.update({k: v for k, v in found.now.items() if k in ("etag", "version", "mtime")})
        keep_in_cache(refs, entry)
    return refs


def keep_in_cache(refs: RefsDocument, entry: Path) -> None:
    """Write ``refs`` to the cache ``entry`` atomically; a cache that cannot take it is left as it is."""
    from ...errors import OutputError
    from ...formats import write_json

    try:
        write_json(refs, entry)
    except (OSError, OutputError):  # a read-only or full cache (or one under a file) never stops the read
        pass


def load_index(target: Any, *, storage_options: dict[str, Any] | None = None, cache: CacheSetting = True,
               options: ScanOptions | None = None, accept: Callable[[RefsDocument], None] | None = None,
               fetched: Future | None = None) -> tuple[Any, bool]:
    """(index, fresh): a refs dict or a parquet folder path; ``fresh`` when it was just made or
    checked against its source (so the caller need not check again).  ``accept``: see
    :func:`index_of_file` (an HDF5 input only); ``fetched``: see :func:`load_refs`."""
    if isinstance(target, dict):
        return target, False
    target = os.fspath(target)
    kind = kind_of(target, storage_options)
    if kind == "hdf5":
        return index_of_file(target, storage_options=storage_options, cache=cache, options=options,
                             accept=accept), True
    return load_refs(target, storage_options, fetched if kind == "json" else None), False


def load_refs(refs: Any, storage_options: dict[str, Any] | None = None, fetched: Future | None = None) -> Any:
    """A refs dict from a dict or a JSON file/URL, or a parquet folder (returned as its path).

    A JSON index is fetched with one request (no listing or size probe first); ``fetched``:
    that request already started (:func:`refindex.read.h5py_road.fetch_early`), its bytes or error.
    """
    if isinstance(refs, dict):
        return refs
    path = os.fspath(refs)
    fs, p = quick_filesystem(path, storage_options)
    if urls.is_local(path) and os.path.isdir(p):
        return path  # parquet refs: fsspec's LazyReferenceMapper layout
    try:
        data = fetched.result() if fetched is not None else read_whole(fs, p)
    except IsADirectoryError:
        return path
    except FileNotFoundError as e:
        try:
            if fs.exists(p.rstrip("/") + "/.zmetadata"):
                return path
        except Exception:
            pass
        raise SourceError("index not found", file=path) from e
    except Exception as e:  # refused, forbidden, a server error that outlasted the retries
        raise source_error(e, path, "could not read the index") from e
    if has_hdf5_signature(lambda off, n: bytes(data[off:off + n]), len(data)):
        raise RefindexError("an HDF5 file where a reference index (JSON or parquet) was expected", file=path)
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        head = bytes(data[:64])
        why = f"its JSON is invalid ({e})" if head.lstrip()[:1] in (b"{", b"[") else describe(head)
        raise RefindexError(f"neither a reference index (JSON or parquet) nor an HDF5 file: {why}", file=path) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("refs", doc), dict):
        raise RefindexError("JSON, but not a reference index (no \"refs\" mapping)", file=path)
    return doc


def parquet_metadata(path: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``.zmetadata`` document of a parquet index folder (local or fsspec URL)."""
    fs, p = urls.filesystem(os.fspath(path), storage_options)
    try:
        doc = json.loads(fs.cat_file(p.rstrip("/") + "/" + ZMETADATA))
    except FileNotFoundError as e:
        raise RefindexError("not a parquet reference index (no .zmetadata)", file=os.fspath(path)) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RefindexError(f"damaged .zmetadata: {e}", file=os.fspath(path)) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise RefindexError("parquet reference index without metadata", file=os.fspath(path))
    return doc


def zarr_format_of(index: Any, storage_options: dict[str, Any] | None = None) -> int:
    """2 or 3: the zarr format of a loaded index (a refs dict, or a parquet folder's path)."""
    from ...formats import of_refs

    return of_refs(index if isinstance(index, dict) else parquet_metadata(index, storage_options)["metadata"]).number
