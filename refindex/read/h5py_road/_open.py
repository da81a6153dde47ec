"""``refindex.h5py_file``: a real, read-only ``h5py.File`` whose metadata comes from an index.

An index is read once (:func:`prepared`), checked against its source before any page is
served, and becomes a :class:`Road` (the HDF5 file, its size, the pages, the chunk tables);
:func:`open_road` gives libhdf5 the file object over it.  ``open_nwb`` shares these steps to
choose its reader without reading the index twice.
"""

from __future__ import annotations

import atexit
import os
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ... import urls
from ...errors import RefindexError, RefindexWarning
from ...model import V3_KEYS, Pages, key_of
from ...source import RangeFetcher, in_thread
from ...formats import InlineBytes, pages_of_document
from ..index._load import parquet_metadata
from ..index._names import CacheSetting
from ..zarr_store._open import ReadOptions, SourceCheck, Span, load_judges, opened_icechunk, prepare_unchecked
from ._chunks import ChunkMap, TableLoader, json_loader, parquet_loader
from ._file import EXTERNAL_LINKS, READS_ELSEWHERE, IndexedFile, check_size


_LEFT_OPEN: "weakref.WeakSet[Any]" = weakref.WeakSet()  # the road's h5py Files, until closed or freed


@atexit.register
def _close_left_open() -> None:
    """Close the road's files still open at exit, while the interpreter still runs: libhdf5 closes what is
    left from its own exit handler, after the interpreter is gone, and h5py's file-object driver then
    calls into it (a segmentation fault: seen with a file kept by a class attribute of a module freed
    last).  An exit handler registered before the first open runs after this one: it finds them closed."""
    for f in list(_LEFT_OPEN):
        try:
            f.close()
        except Exception:  # noqa: BLE001 - the process is ending: nothing left to tell
            pass


@dataclass
class Road:
    """What the h5py road needs of an index: the file its pages describe, the pages, its chunk tables."""

    url: str  # the HDF5 file
    size: int
    pages: Pages | None
    loader: TableLoader | None
    options: dict[str, Any]  # storage options to reach the file
    whole: bool = False  # its server ignores Range requests (the index says): read it whole, once

    @property
    def external_links(self) -> int:
        return self.pages.external_links if self.pages is not None else 0


@dataclass
class Prepared:
    """An index as loaded, before its road is taken: its provenance (where the pages are) and how to go on."""

    prov: dict[str, Any]
    pages_doc: Any  # the pages' JSON form, or None
    loader: TableLoader | None
    options: dict[str, Any]
    label: str
    own: str | None
    check: SourceCheck  # the freshness check, run before any page is served
    loaded: Any = None  # the index as read_options' reader has it (zarr road)
    read_options: ReadOptions | None = None
    icechunk: Any = None
    inline: InlineBytes | None = None  # a JSON index's inline chunks: the pages' holes are filled from them
    held: bytes | None = None  # the whole file, when its scan just fetched it (a small file made on the fly)

    @property
    def external_links(self) -> bool:
        """Does the file link into other files?  (From the pages; an index without them: its links.)"""
        if isinstance(self.pages_doc, dict) and "external_links" in self.pages_doc:
            return bool(self.pages_doc["external_links"])
        if isinstance(self.loaded, dict):
            from ...model import external_sources

            return bool(external_sources(self.loaded))
        return False

    def road(self) -> Road:
        """The road, once the freshness check passed.  The check's round trip runs in a thread
        while the pages are decoded: nothing is served before it has passed.  Pages kept in the
        file (a small file) are the whole file, read in the check's round trip (or ``held``)."""
        whole = _whole_file(self.pages_doc)
        if whole is not None:
            held = self.held if self.held is not None and len(self.held) == whole[1] else None
            fetched = self.check(also=[whole] if held is None else [])
            return _road(self.prov, self.pages_doc, self.loader, self.options, self.label, self.own, self.inline,
                         held if held is not None else fetched.get(whole))
        return _checked_beside(self.check, lambda: _road(self.prov, self.pages_doc, self.loader, self.options,
                                                           self.label, self.own, self.inline))


def _whole_file(doc: Any) -> Span | None:
    """The span of a file whose pages a reader fetches whole (``Pages.in_file``), else None."""
    if isinstance(doc, dict) and doc.get("in_file") and isinstance(doc.get("file_size"), int):
        return 0, doc["file_size"]
    return None


def _checked_beside(check: SourceCheck, work: Callable[[], Road]) -> Road:
    """``work()`` once ``check()`` has passed, the two side by side (the check's error first: a
    changed source explains an index that no longer decodes)."""
    checked = in_thread("refindex-check", check)  # (the check retries by itself)
    try:
        out = work()
    except BaseException:
        if checked.exception() is not None:
            raise checked.exception() from None
        raise
    checked.result()
    return out


def open_road(road: Road) -> Any:
    """The ``h5py.File`` over ``road`` (``f.refindex_file``: the file object, with its ``stats``)."""
    import h5py

    fetcher = RangeFetcher(road.url, road.options, whole_size=road.size if road.whole else None)
    if road.pages is not None and road.pages.in_file and road.pages.awaiting_bytes:
        road.pages = road.pages.fetched(_whole(fetcher, road.url, road.size))  # not read by the check (not asked)
    chunks = ChunkMap(road.pages.extents if road.pages is not None else {}, road.loader)
    fh = IndexedFile(road.url, road.size, road.pages, fetcher, chunks)
    try:
        f = h5py.File(fh, "r")
    except OSError as e:
        fh.close()
        raise RefindexError(f"h5py cannot open it through the index: {e}", file=road.url) from e
    f.refindex_file = fh
    fh.opened = True
    _LEFT_OPEN.add(f)
    if road.external_links:
        warnings.warn(f"{road.url} has {road.external_links} external link(s): {EXTERNAL_LINKS}", RefindexWarning,
                      stacklevel=3)
    elsewhere = road.pages.reads_elsewhere if road.pages is not None else []
    if elsewhere:
        warnings.warn(f"{road.url}: {', '.join(elsewhere[:5])}{' ...' if len(elsewhere) > 5 else ''}: "
                      f"{READS_ELSEWHERE}", RefindexWarning, stacklevel=3)
    return f


def prepared(target: Any, *, storage_options: dict[str, Any] | None, remote_options: dict[str, Any] | None,
             check_source: bool, cache: CacheSetting, allowed_urls: Sequence[str] | None, trust: bool,
             group: str | None, branch: str | None, snapshot: str | None,
             accept: Callable[[Any], None] | None = None, fetched: Future | None = None) -> Prepared:
    """The index of ``target`` read once (the HDF5 file scanned or found in the cache first); its
    freshness check runs when the road is taken (:meth:`Prepared.road`).  ``accept(index)`` may
    refuse the index of an HDF5 input before it is cached (``open_nwb``: not an NWB file);
    ``fetched``: a JSON index's request already started (:func:`fetch_early`)."""
    ic = opened_icechunk(target, storage_options=storage_options, remote_options=remote_options, group=group,
                         branch=branch, snapshot=snapshot, check_source=check_source)  # checked here
    if ic is not None:
        from ...formats.icechunk import read_pages

        record = ic.record()
        named = record.get("pages")
        doc = read_pages(ic.repository, ic.storage_options, named) if named else None
        so = ic.source_options if ic.source_options is not None else (ic.storage_options or {})
        return Prepared(record, doc, None, so, ic.label, None, lambda also=(): {}, icechunk=ic)
    opts = ReadOptions.of(storage_options=storage_options, remote_options=remote_options, check_source=check_source,
                          cache=cache, allowed_urls=allowed_urls, trust=trust)
    if fetched is not None:
        load_judges(check_source)  # while the index travels
    loaded, opts, check = prepare_unchecked(target, opts, accept=accept, fetched=fetched)
    so = dict(opts.remote_options if opts.remote_options is not None else opts.storage_options or {})
    label = "index" if isinstance(target, dict) else os.fspath(target)
    if isinstance(loaded, dict):
        prov = loaded.get("refindex") or {}
        own = (loaded.get("templates") or {}).get("u") or (prov.get("source") or {}).get("url")
        return Prepared(prov, prov.get("pages"), json_loader(loaded, own) if own else None, so, label, own, check,
                        loaded, opts, inline=json_inline_items(loaded))
    prov = parquet_metadata(loaded, opts.storage_options).get("refindex") or {}

    def fresh(also: Sequence[Span] = ()) -> dict[Span, bytes]:  # a parquet index keeps its provenance in .zmetadata
        if check_source:
            from ..freshness import check_source as check_against  # refindex.read.check_source

            found = check_against({"refindex": prov}, storage_options=opts.remote_options, also=also)
            return found.fetched if found is not None else {}
        return {}

    own = (prov.get("templates") or {}).get("u") or (prov.get("source") or {}).get("url")
    return Prepared(prov, prov.get("pages"), parquet_loader(loaded, opts.storage_options, own) if own else None, so,
                    os.fspath(loaded), own, fresh, loaded, opts)


def _road(prov: dict[str, Any], doc: Any, loader: TableLoader | None, options: dict[str, Any], label: str,
          own: str | None = None, inline: InlineBytes | None = None, whole: bytes | None = None) -> Road:
    source = prov.get("source") or {}
    url = own or source.get("url")
    if not url:
        raise RefindexError("the index does not say which HDF5 file it describes (no templates or source)",
                            file=label)
    pages = pages_of_document(doc, file=label, inline=inline) if doc else None
    size = source.get("size") if source.get("url") in (None, url) else None
    if size is None:
        size = pages.file_size if pages is not None else _size_of(url, options)
    check_size(url, int(size), pages)
    if pages is not None and pages.in_file and whole is not None and len(whole) == pages.file_size:
        pages = pages.fetched(whole)
    whole = source.get("range_requests") is False and source.get("url") in (None, url)
    return Road(urls.normalise(url) if urls.is_local(url) else url, int(size), pages, loader, options, whole)


def json_inline_items(refs: dict[str, Any]) -> InlineBytes:
    """A JSON index's inline chunks (item -1) and the items of its variable-length ones, by array path,
    model chunk key and item: what fills the holes of its pages."""
    import base64
    import json

    from ...codecs import v2_pipeline, vlen_chunk_items

    body = refs.get("refs") if "version" in refs else refs
    v3 = "zarr.json" in body
    decoded: dict[tuple[str, str], list[bytes] | None] = {}

    def chunk(path: str, key: str) -> tuple[bytes | None, Any, Any]:
        prefix = key_of(path) + "/" if key_of(path) else ""
        meta = json.loads(body.get(prefix + ("zarr.json" if v3 else ".zarray")) or "null")
        if not isinstance(meta, dict):
            return None, None, None
        if v3:
            filters, compressor = v2_pipeline(meta.get("codecs") or [])
            key = V3_KEYS.of_model_key(key, len(meta.get("shape") or ()))
        else:
            filters, compressor = meta.get("filters"), meta.get("compressor")
        value = body.get(prefix + key)
        if not isinstance(value, str) or not value.startswith("base64:"):
            return None, None, None
        return base64.standard_b64decode(value[7:]), filters, compressor

    def inline(path: str, key: str, item: int) -> bytes | None:
        if item < 0:
            return chunk(path, key)[0]
        if (path, key) not in decoded:
            raw, filters, compressor = chunk(path, key)
            decoded[path, key] = vlen_chunk_items(raw, filters, compressor) if raw is not None else None
        items = decoded[path, key]
        return items[item] if items is not None and item < len(items) else None

    return inline


def _whole(fetcher: RangeFetcher, url: str, size: int) -> bytes:
    """All of a small file (its pages kept in it), which must still be ``size`` bytes long."""
    data = fetcher.fetch([(0, size)])[0] if size else b""
    if len(data) != size:
        raise RefindexError(f"the file is {len(data)} bytes long, not the {size} its index describes", file=url)
    return data


def _size_of(url: str, options: dict[str, Any]) -> int:
    from ...source import stat

    return int(stat(url, options)["size"])
