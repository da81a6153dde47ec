"""``refindex.h5py_file``: a real, read-only ``h5py.File`` whose metadata comes from an index."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import urls
from ...errors import RefindexError
from ...model import Pages
from ...source import RangeFetcher
from ...writers import pages_of_document
from .._load import CacheSetting, parquet_metadata
from .._open import ReadOptions, opened_icechunk, prepare_unchecked
from ._chunks import ChunkMap, TableLoader, json_loader, parquet_loader
from ._file import IndexedFile, check_size


@dataclass
class Road:
    """What the h5py road needs of an index: the file its pages describe, the pages, its chunk tables."""

    url: str  # the HDF5 file
    size: int
    pages: Pages | None
    loader: TableLoader | None
    options: dict[str, Any]  # storage options to reach the file


def h5py_file(target: Any, *, storage_options: dict[str, Any] | None = None,
              remote_options: dict[str, Any] | None = None, check_source: bool = True, cache: CacheSetting = True,
              allowed_urls: Sequence[str] | None = None, trust: bool = False, group: str | None = None,
              branch: str | None = None, snapshot: str | None = None) -> Any:
    """A read-only ``h5py.File`` of the HDF5 file an index describes, opened from the index's pages.

    ``target``: an index (dict, JSON path/URL, parquet folder, Icechunk repository with
    ``group``/``branch``/``snapshot``) or the HDF5 file itself (local path or URL: scanned
    on the fly, or found in the local index ``cache``, as :func:`refindex.open_nwb` does).
    libhdf5 reads the metadata the index carries (its pages: no request); other bytes come
    by range requests from the file, through refindex's source layer (retries, a block cache
    for small reads, the chunks libhdf5 will ask for next fetched ahead, concurrently).

    It is a real ``h5py.File`` (h5py's file-object driver): unchanged h5py code, pynwb's
    ``NWBHDF5IO(file=...)``, nwbinspector or dandi-cli read it as they read any file.  The
    index is checked against its source (``check_source``) before any page is served.
    ``storage_options`` reach the index (or the HDF5 file given directly),
    ``remote_options`` the file an index describes (default: ``storage_options``); the
    other keywords are those of :func:`refindex.open`.  An index without pages (made with
    ``pages=False`` or by another tool) still works: every metadata read is then a request.
    """
    import h5py

    road = road_of(target, storage_options=storage_options, remote_options=remote_options,
                   check_source=check_source, cache=cache, allowed_urls=allowed_urls, trust=trust, group=group,
                   branch=branch, snapshot=snapshot)
    fetcher = RangeFetcher(road.url, road.options)
    chunks = ChunkMap(road.pages.extents if road.pages is not None else {}, road.loader)
    fh = IndexedFile(road.url, road.size, road.pages, fetcher, chunks)
    try:
        f = h5py.File(fh, "r")
    except OSError as e:
        fh.close()
        raise RefindexError(f"h5py cannot open it through the index: {e}", file=road.url) from e
    return f


def road_of(target: Any, *, storage_options: dict[str, Any] | None, remote_options: dict[str, Any] | None,
            check_source: bool, cache: CacheSetting, allowed_urls: Sequence[str] | None, trust: bool,
            group: str | None, branch: str | None, snapshot: str | None) -> Road:
    """The index of ``target``, checked against its source (before any page is served), as a :class:`Road`."""
    ic = opened_icechunk(target, storage_options=storage_options, remote_options=remote_options, group=group,
                         branch=branch, snapshot=snapshot, check_source=check_source)
    if ic is not None:
        from ...writers.icechunk import read_pages

        record = ic.record()
        named = record.get("pages")
        doc = read_pages(ic.repository, ic.storage_options, named) if named else None
        so = ic.source_options if ic.source_options is not None else (ic.storage_options or {})
        return _road(record, doc, None, so, ic.label)
    loaded, opts, check = prepare_unchecked(target, ReadOptions.of(
        storage_options=storage_options, remote_options=remote_options, check_source=check_source, cache=cache,
        allowed_urls=allowed_urls, trust=trust))
    so = dict(opts.remote_options if opts.remote_options is not None else opts.storage_options or {})
    if isinstance(loaded, dict):
        check()
        prov = loaded.get("refindex") or {}
        own = (loaded.get("templates") or {}).get("u") or (prov.get("source") or {}).get("url")
        return _road(prov, prov.get("pages"), json_loader(loaded, own) if own else None, so,
                     os.fspath(target) if not isinstance(target, dict) else "index", own)
    prov = parquet_metadata(loaded, opts.storage_options).get("refindex") or {}
    if check_source:
        from .._provenance import check_source as fresh  # refindex.read.check_source: every reader's check

        fresh({"refindex": prov}, storage_options=opts.remote_options)
    own = (prov.get("templates") or {}).get("u") or (prov.get("source") or {}).get("url")
    return _road(prov, prov.get("pages"), parquet_loader(loaded, opts.storage_options, own) if own else None, so,
                 os.fspath(loaded), own)


def _road(prov: dict[str, Any], doc: Any, loader: TableLoader | None, options: dict[str, Any], label: str,
          own: str | None = None) -> Road:
    source = prov.get("source") or {}
    url = own or source.get("url")
    if not url:
        raise RefindexError("the index does not say which HDF5 file it describes (no templates or source)",
                            file=label)
    pages = pages_of_document(doc, file=label) if doc else None
    size = source.get("size") if source.get("url") in (None, url) else None
    if size is None:
        size = pages.file_size if pages is not None else _size_of(url, options)
    check_size(url, int(size), pages)
    return Road(urls.normalise(url) if urls.is_local(url) else url, int(size), pages, loader, options)


def _size_of(url: str, options: dict[str, Any]) -> int:
    from ...source import stat

    return int(stat(url, options)["size"])
