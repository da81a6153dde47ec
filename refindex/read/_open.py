"""Open an index (or an HDF5 file, indexed on the fly) as a read-only zarr group.

JSON indexes are read through :class:`~refindex.read.IndexStore` (metadata and inline values
from memory, chunk ranges fetched in merged batches); parquet folders and indexes with
generators through fsspec's ReferenceFileSystem, which zarr 3 needs asynchronous, with
remote targets created asynchronous too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from ..model import RefsDocument
from ._load import CacheSetting, load_index, load_refs, parquet_metadata


@dataclass
class ReadOptions:
    """How an index and the files its chunks live in are reached.

    ``storage_options``: fsspec options for reading the index itself (or the HDF5 file, when
    one is opened directly).  ``remote_options``: for the files the chunks live in (e.g.
    ``{"anon": True}`` or an ``endpoint_url``); ``remote_protocol`` narrows them to one
    protocol.  ``check_source``: refuse (``StaleIndexError``) an index whose source changed
    since it was made.  ``cache``: where the index of an HDF5 input is kept (see
    :mod:`refindex.read`; False: nowhere).
    """

    storage_options: dict[str, Any] = field(default_factory=dict)
    remote_options: dict[str, Any] | None = None
    remote_protocol: str | None = None
    check_source: bool = True
    cache: CacheSetting = True

    @classmethod
    def of(cls, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
           remote_protocol: str | None = None, check_source: bool = True, cache: CacheSetting = True) -> "ReadOptions":
        return cls(dict(storage_options or {}), remote_options, remote_protocol, check_source, cache)


def prepare(refs: Any, opts: ReadOptions) -> tuple[Any, ReadOptions]:
    """(the index of ``refs``, the options to read it with), the index checked against its source.

    ``refs`` is an index or an HDF5 file/URL (indexed on the fly, through the cache); for an
    HDF5 input ``storage_options`` reach the file, so they also serve as the
    ``remote_options`` its chunks are read with, unless those are given.
    """
    loaded, fresh = load_index(refs, storage_options=opts.storage_options, cache=opts.cache)
    if fresh and opts.storage_options and opts.remote_options is None:
        opts = replace(opts, remote_options=opts.storage_options)
    if opts.check_source and not fresh:
        from ._provenance import check_source

        check_source(loaded, storage_options=opts.remote_options)
    return loaded, opts


def target_protocol(refs: Any, storage_options: dict[str, Any] | None = None) -> str | None:
    """The protocol of the files an index's chunks live in (from its URL templates)."""
    if not isinstance(refs, dict):  # parquet folder: templates are kept in its .zmetadata
        refs = parquet_metadata(refs, storage_options).get("refindex") or {}
    for url in (refs.get("templates") or {}).values():
        import fsspec

        return fsspec.core.split_protocol(url)[0] or "file"
    return None


def reference_fs(refs: Any, opts: ReadOptions):
    """An asynchronous ReferenceFileSystem over ``refs`` as zarr 3 needs it."""
    import fsspec

    refs = load_refs(refs, opts.storage_options)
    protocol = opts.remote_protocol or target_protocol(refs, opts.storage_options)
    kwargs: dict[str, Any] = {"fo": refs, "asynchronous": True}
    if protocol and protocol not in ("file", "local"):
        kwargs["remote_protocol"] = protocol
        kwargs["remote_options"] = {**(opts.remote_options or {}), "asynchronous": True}
    elif opts.remote_options:
        kwargs["remote_options"] = opts.remote_options
    if not isinstance(refs, dict):
        kwargs["target_options"] = opts.storage_options or {}
        # else fsspec scans the lazy (parquet) references for a URL to guess the protocol
        kwargs.setdefault("remote_protocol", protocol or "file")
    return fsspec.filesystem("reference", **kwargs)


def index_store(refs: RefsDocument, opts: ReadOptions, *, label: str | None = None):
    """An :class:`~refindex.read.IndexStore` over a JSON index dict (inline values served from memory)."""
    from ..codecs import register_codecs, register_stock_codecs
    from ._store import IndexStore, fsspec_range_reader

    register_codecs()
    register_stock_codecs()  # imagecodecs ships no numcodecs entry points: readers register its codecs
    body = refs.get("refs") if "version" in refs else refs
    per_protocol = {opts.remote_protocol: opts.remote_options or {}} if opts.remote_protocol else None
    reader = fsspec_range_reader(None if opts.remote_protocol else opts.remote_options, per_protocol)
    name = label or "refindex:" + str((refs.get("templates") or {}).get("u") or id(refs))
    return IndexStore(body, refs.get("templates"), reader, label=name)


def store_of(refs: Any, opts: ReadOptions):
    """A read-only zarr store over the index: an IndexStore for JSON indexes, else an ``FsspecStore``
    over fsspec's ReferenceFileSystem (parquet folders, and indexes with generators)."""
    import zarr

    from ..codecs import register_codecs, register_stock_codecs

    register_codecs()
    register_stock_codecs()  # imagecodecs ships no numcodecs entry points: readers register its codecs
    loaded = load_refs(refs, opts.storage_options)
    if isinstance(loaded, dict) and "gen" not in loaded:
        return index_store(loaded, opts)
    return zarr.storage.FsspecStore(reference_fs(loaded, opts), read_only=True, path="")


def store(refs: Any, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
          remote_protocol: str | None = None):
    """A read-only zarr store over an index (no freshness check): :func:`store_of` with keywords."""
    return store_of(refs, ReadOptions.of(storage_options=storage_options, remote_options=remote_options,
                                         remote_protocol=remote_protocol))


def open(refs: Any, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
         remote_protocol: str | None = None, check_source: bool = True, cache: CacheSetting = True):
    """Open an index (dict, JSON path/URL or parquet folder) or an HDF5 file/URL as a read-only ``zarr.Group``.

    The hierarchy comes from the consolidated ``.zmetadata`` alone (one read, however deep
    the file), or per node when an index has none.  Keywords are those of :class:`ReadOptions`.
    """
    from ._consolidated import open_group

    loaded, opts = prepare(refs, ReadOptions.of(storage_options=storage_options, remote_options=remote_options,
                                                remote_protocol=remote_protocol, check_source=check_source,
                                                cache=cache))
    return open_group(store_of(loaded, opts))


def index_location(refs: Any) -> str | None:
    """Where an index given as a path or URL lives (None for a dict): files it names are beside it."""
    return None if isinstance(refs, dict) else os.fspath(refs)
