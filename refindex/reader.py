"""Read side: open an index as a read-only zarr group (or an NWB file).

zarr-python 3 needs an asynchronous ReferenceFileSystem, and remote targets need
their own filesystem created asynchronous too; this module hides that friction.
"""

from __future__ import annotations

import json
import os
from typing import Any

import fsspec

from .errors import RefindexError, SourceError


def load_refs(refs: Any, storage_options: dict[str, Any] | None = None) -> Any:
    """A refs dict from a dict or a JSON file/URL, or a parquet folder (returned as its path).

    A JSON index is fetched with one request (no listing or size probe first).
    """
    if isinstance(refs, dict):
        return refs
    path = os.fspath(refs)
    fs, p = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if ("://" not in path or path.startswith("file://")) and os.path.isdir(p):
        return path  # parquet refs: fsspec's LazyReferenceMapper layout
    try:
        data = fs.cat_file(p)
    except IsADirectoryError:
        return path
    except FileNotFoundError as e:
        try:
            if fs.exists(p.rstrip("/") + "/.zmetadata"):
                return path
        except Exception:
            pass
        raise SourceError("index not found", file=path) from e
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        from .source import describe

        head = bytes(data[:64])
        why = f"its JSON is invalid ({e})" if head.lstrip()[:1] in (b"{", b"[") else describe(head)
        raise RefindexError(f"neither a reference index (JSON or parquet) nor an HDF5 file: {why}", file=path) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("refs", doc), dict):
        raise RefindexError("JSON, but not a reference index (no \"refs\" mapping)", file=path)
    return doc


def _target_protocol(refs: Any, storage_options: dict[str, Any] | None = None) -> str | None:
    if not isinstance(refs, dict):  # parquet folder: templates are kept in its .zmetadata
        from .parquet import read_metadata

        refs = read_metadata(refs, storage_options).get("refindex") or {}
    for url in (refs.get("templates") or {}).values():
        return fsspec.core.split_protocol(url)[0] or "file"
    return None


def reference_fs(
    refs: Any,
    *,
    remote_protocol: str | None = None,
    remote_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
):
    """An asynchronous ReferenceFileSystem over ``refs`` as zarr 3 needs it."""
    refs = load_refs(refs, storage_options)
    protocol = remote_protocol or _target_protocol(refs, storage_options)
    kwargs: dict[str, Any] = {"fo": refs, "asynchronous": True}
    if protocol and protocol not in ("file", "local"):
        kwargs["remote_protocol"] = protocol
        kwargs["remote_options"] = {**(remote_options or {}), "asynchronous": True}
    elif remote_options:
        kwargs["remote_options"] = remote_options
    if not isinstance(refs, dict):
        kwargs["target_options"] = storage_options or {}
        # else fsspec scans the lazy (parquet) references for a URL to guess the protocol
        kwargs.setdefault("remote_protocol", protocol or "file")
    return fsspec.filesystem("reference", **kwargs)


def index_store(refs: dict[str, Any], *, label: str | None = None, remote_protocol: str | None = None,
                remote_options: dict[str, Any] | None = None, storage_options: dict[str, Any] | None = None):
    """An :class:`~refindex.store.IndexStore` over a JSON index dict (inline values served from memory).

    ``remote_options``: fsspec options for the files the chunks live in (every remote
    protocol; ``remote_protocol`` only narrows which one, for symmetry with ``store``).
    """
    from .codecs import register_codecs
    from .store import IndexStore, fsspec_range_reader

    register_codecs()
    body = refs.get("refs") if "version" in refs else refs
    protocol_options = {remote_protocol: remote_options or {}} if remote_protocol else None
    reader = fsspec_range_reader(None if remote_protocol else remote_options, protocol_options)
    name = label or "refindex:" + str((refs.get("templates") or {}).get("u") or id(refs))
    return IndexStore(body, refs.get("templates"), reader, label=name)


def store(refs: Any, **kwargs: Any):
    """A read-only zarr store over the index: an IndexStore for JSON indexes, else an ``FsspecStore``
    over fsspec's ReferenceFileSystem (parquet folders, and indexes with generators)."""
    import zarr

    from .codecs import register_codecs

    register_codecs()
    loaded = load_refs(refs, kwargs.get("storage_options"))
    if isinstance(loaded, dict) and "gen" not in loaded:
        return index_store(loaded, **kwargs)
    return zarr.storage.FsspecStore(reference_fs(loaded, **kwargs), read_only=True, path="")


def _prepare(refs: Any, check_source: bool, cache: Any, kwargs: dict[str, Any]) -> Any:
    """The index of ``refs`` (an index, or an HDF5 file/URL scanned on the fly), checked against its source.

    For an HDF5 input ``storage_options`` reach the file, so they also serve as the
    ``remote_options`` its chunks are read with, unless those are given.
    """
    from .inputs import load_index

    loaded, fresh = load_index(refs, storage_options=kwargs.get("storage_options"), cache=cache)
    if fresh and kwargs.get("storage_options") and "remote_options" not in kwargs:
        kwargs["remote_options"] = kwargs["storage_options"]
    if check_source and not fresh:
        from .provenance import check_source as _check

        _check(loaded, storage_options=kwargs.get("remote_options"))
    return loaded


def open(refs: Any, *, check_source: bool = True, cache: Any = True, **kwargs: Any):
    """Open an index (dict, JSON path/URL or parquet folder) or an HDF5 file/URL as a read-only ``zarr.Group``.

    Keyword arguments: ``remote_protocol``, ``remote_options`` (for the files the chunks
    live in, e.g. ``{"anon": True}`` or an ``endpoint_url``), ``storage_options`` (for
    reading the index itself, or the HDF5 file).  The hierarchy comes from the
    consolidated ``.zmetadata`` alone (one read, however deep the file), or per node when
    an index has none.  ``check_source``: refuse (``StaleIndexError``) when the source
    changed since indexing; one ``info`` call, skipped for indexes without provenance.
    ``cache``: where an HDF5 input's index is kept (see :mod:`refindex.inputs`; False: nowhere).
    """
    from .consolidated import open_group

    loaded = _prepare(refs, check_source, cache, kwargs)
    return open_group(store(loaded, **kwargs))


def external_sources_of(refs: dict[str, Any]) -> list[str]:
    """The other files (``source`` values other than ".") that links and attribute references name."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            src = v.get("source")
            if isinstance(src, str) and src != "." and "path" in v:
                found.add(src)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for key, value in (refs.get("refs") or {}).items():
        if key.rsplit("/", 1)[-1] == ".zattrs" and isinstance(value, str):
            walk(json.loads(value))
    return sorted(found)


def beside(url: str, name: str) -> str:
    """``name`` (relative or absolute path, or URL) resolved against the folder of ``url``."""
    import posixpath

    if "://" in name or os.path.isabs(name):
        return name
    if "://" in url:
        proto, rest = url.split("://", 1)
        return proto + "://" + posixpath.normpath(posixpath.join(posixpath.dirname(rest), name))
    return os.path.normpath(os.path.join(os.path.dirname(url), name))


def open_nwb(refs: Any, *, external: dict[str, Any] | None = None, scan_missing: bool = True,
             check_source: bool = True, cache: Any = True, **kwargs: Any):
    """Lazily read an NWB file with hdmf-zarr's ``NWBZarrV2IO``, through its index or from the file itself.

    ``refs``: an index (dict, JSON path/URL, parquet folder) or the NWB file (local path or
    URL: scanned on the fly, the index kept in the local ``cache``, see :mod:`refindex.inputs`).
    Returns the ``NWBFile``; arrays stay lazy (read on access).  The IO object is kept
    on the returned file as ``nwbfile.refindex_io`` so it is not garbage collected.
    Keyword arguments as for :func:`open`.

    External links (``zarr_link`` entries whose ``source`` is another file) are resolved
    through that file's index: embedded by ``scan(..., follow_external=True)``, written
    beside the index by ``scan_to_file``/``refindex scan --follow-external``, given in
    ``external`` (source -> refs dict or index path), or else (``scan_missing``) made on
    the fly from the HDF5 file next to the indexed file.
    """
    from .nwb import read_nwb

    index_location = None if isinstance(refs, dict) else os.fspath(refs)
    loaded = _prepare(refs, check_source, cache, kwargs)
    return read_nwb(store(loaded, **kwargs), loaded if isinstance(loaded, dict) else None,
                    index_location=index_location, external=external, scan_missing=scan_missing, **kwargs)
