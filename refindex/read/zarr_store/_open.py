"""Open an index (or an HDF5 file, indexed on the fly) as a read-only zarr group.

JSON indexes are read through :class:`~refindex.read.IndexStore` (metadata and inline values
from memory, chunk ranges fetched in merged batches); parquet folders and indexes with
generators through fsspec's ReferenceFileSystem, which zarr 3 needs asynchronous, with
remote targets created asynchronous too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ...model import RefsDocument
from ..index._load import load_index, load_refs, parquet_metadata, zarr_format_of
from ..index._names import CacheSetting, IndexCache
from ..index._repository import named_otherwise
from ..index._urlpolicy import UrlPolicy, allowed_patterns


Span = tuple[int, int]


class SourceCheck(Protocol):
    """The check of an index against its source, run before anything read through the index is handed
    out: raises :class:`~refindex.errors.StaleIndexError`, or returns the bytes of ``also`` it read in
    the same round trip (none when nothing was checked: an index made just now, ``check_source=False``)."""

    def __call__(self, also: Sequence[Span] = ()) -> dict[Span, bytes]: ...


@dataclass
class ReadOptions:
    """How an index and the files its chunks live in are reached.

    ``storage_options``: fsspec options for reading the index itself (or the HDF5 file, when
    one is opened directly).  ``remote_options``: for the files the chunks live in (e.g.
    ``{"anon": True}`` or an ``endpoint_url``); ``remote_protocol`` narrows them to one
    protocol.  ``check_source``: refuse (``StaleIndexError``) an index whose source changed
    since it was made.  ``cache``: where the index of an HDF5 input is kept (see
    :mod:`refindex.read`; False: nowhere).

    Which URLs the index may make the reader fetch (see :mod:`refindex.read.index._urlpolicy`):
    ``allowed_urls`` are URL prefixes (or patterns with ``*``) allowed whatever the rules say,
    ``trust`` allows everything, ``index_url`` is where the index came from (None for a dict
    made in memory; a service that fetched an index itself can name its origin here, so it is
    judged as an index from there).
    """

    storage_options: dict[str, Any] = field(default_factory=dict)
    remote_options: dict[str, Any] | None = None
    remote_protocol: str | None = None
    check_source: bool = True
    cache: CacheSetting = True
    allowed_urls: tuple[str, ...] = ()
    trust: bool = False
    index_url: str | None = None

    @classmethod
    def of(cls, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
           remote_protocol: str | None = None, check_source: bool = True, cache: CacheSetting = True,
           allowed_urls: Sequence[str] | str | None = None, trust: bool = False,
           index_url: str | None = None) -> "ReadOptions":
        return cls(dict(storage_options or {}), remote_options, remote_protocol, check_source, IndexCache.of(cache),
                   allowed_patterns(allowed_urls), trust, index_url)

    def url_policy(self) -> UrlPolicy:
        """The policy the URLs of the index read with these options are judged by."""
        return UrlPolicy(self.index_url, allowed=self.allowed_urls, trust=self.trust)


def prepare(refs: Any, opts: ReadOptions) -> tuple[Any, ReadOptions]:
    """(the index of ``refs``, the options to read it with), the index checked against its source
    (see :func:`prepare_unchecked`)."""
    loaded, opts, check = prepare_unchecked(refs, opts)
    check()
    return loaded, opts


def prepare_unchecked(refs: Any, opts: ReadOptions, accept: Callable[[Any], None] | None = None,
                      fetched: Future | None = None) -> tuple[Any, ReadOptions, SourceCheck]:
    """(the index of ``refs``, the options to read it with, the check of the index against its
    source): a caller may start reading while the check's round trip runs, as long as it
    calls the check before it hands anything out.

    ``refs`` is an index or an HDF5 file/URL (indexed on the fly, through the cache); for an
    HDF5 input ``storage_options`` reach the file, so they also serve as the
    ``remote_options`` its chunks are read with, unless those are given.

    Before anything else is read (the freshness check asks its source), every URL a JSON
    index names is judged (:func:`check_index`); the options returned then trust it, as
    they trust an index made here from the file the caller named.  ``index_url`` is
    filled in with where the index (or the file) is.  ``accept(index)`` may refuse the index
    of an HDF5 input before it is cached (``open_nwb``: not an NWB file); ``fetched``: a JSON
    index's request already started (see :func:`~refindex.read.load_refs`).
    """
    loaded, fresh = load_index(refs, storage_options=opts.storage_options, cache=opts.cache, accept=accept,
                               fetched=fetched)
    if opts.index_url is None and not isinstance(refs, dict):
        opts = replace(opts, index_url=os.fspath(refs))
    if fresh:
        opts = replace(opts, trust=True)
    elif not opts.trust and check_index(loaded, opts):
        opts = replace(opts, trust=True)
    if fresh and opts.storage_options and opts.remote_options is None:
        opts = replace(opts, remote_options=opts.storage_options)

    def check(also: Sequence[Span] = ()) -> dict[Span, bytes]:
        if opts.check_source and not fresh:
            from ..freshness import check_source

            found = check_source(declared_of(loaded, opts), storage_options=opts.remote_options, also=also)
            return found.fetched if found is not None else {}
        return {}

    return loaded, opts, check


def load_judges(check_source: bool) -> None:
    """Load what judges an index (the policy for its URLs; its freshness check when
    ``check_source``), so a caller can do it while the index is on its way."""
    from ..index._urlcheck import check_refs  # noqa: F401
    if check_source:
        from .. import freshness  # noqa: F401


def check_index(loaded: Any, opts: ReadOptions) -> bool:
    """Refuse (``UntrustedReference``) an index naming a URL its options' policy refuses (its
    provenance source only when ``opts.check_source``: it is not asked otherwise).

    True when every URL was judged (a JSON index without generators); False when the rest
    are judged as its store is made (see :func:`reference_fs`).
    """
    from ..index._urlcheck import check_declared, check_refs

    if opts.trust:
        return True
    if isinstance(loaded, dict) and "gen" not in loaded:
        check_refs(opts.url_policy(), loaded, provenance=opts.check_source)
        return True
    if isinstance(loaded, dict):  # read through fsspec: its keys are judged once fsspec holds them
        check_declared(opts.url_policy(), loaded, provenance=opts.check_source)
    return False  # a parquet index: judged as its store is made (reference_fs)


def parquet_declared(folder: Any, opts: ReadOptions) -> dict[str, Any]:
    """The templates and provenance of a parquet index (kept in its .zmetadata), shaped as in a JSON index."""
    prov = parquet_metadata(folder, opts.storage_options).get("refindex") or {}
    return {"templates": prov.get("templates") or {}, "refindex": prov}


def declared_of(loaded: Any, opts: ReadOptions) -> dict[str, Any]:
    """A loaded index's templates and provenance: the dict itself, or a parquet folder's (from its .zmetadata)."""
    return loaded if isinstance(loaded, dict) else parquet_declared(loaded, opts)


def target_protocol(refs: Any, storage_options: dict[str, Any] | None = None) -> str | None:
    """The protocol of the files an index's chunks live in (from its URL templates)."""
    if not isinstance(refs, dict):  # parquet folder: templates are kept in its .zmetadata
        refs = parquet_metadata(refs, storage_options).get("refindex") or {}
    for url in (refs.get("templates") or {}).values():
        import fsspec

        return fsspec.core.split_protocol(url)[0] or "file"
    return None


def reference_fs(refs: Any, opts: ReadOptions):
    """An asynchronous ReferenceFileSystem over ``refs`` as zarr 3 needs it.

    Unless ``opts`` trust the index, its declared sources are judged now, the keys of a
    dict all at once, and those of a parquet index as a key resolves to its URL, before its
    bytes are requested.
    """
    from ..index._urlcheck import guarded_reference_fs

    if opts.index_url is None and not isinstance(refs, dict):
        opts = replace(opts, index_url=os.fspath(refs))
    refs = load_refs(refs, opts.storage_options)
    declared = refs if isinstance(refs, dict) else parquet_declared(refs, opts)  # one read of .zmetadata
    policy = None if opts.trust else opts.url_policy()
    if policy is not None:
        from ..index._urlcheck import check_declared

        check_declared(policy, declared, provenance=opts.check_source and isinstance(refs, dict))
    protocol = opts.remote_protocol or target_protocol(declared, opts.storage_options)
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
    return guarded_reference_fs(policy, **kwargs)


def index_store(refs: RefsDocument, opts: ReadOptions, *, label: str | None = None):
    """An :class:`~refindex.read.IndexStore` over a JSON index dict (inline values served from memory).

    Every URL the index names is judged first, unless ``opts`` trust it.
    """
    from ._store import IndexStore, fsspec_range_reader

    check_index(refs, opts)
    register_reader_codecs(refs)
    body = refs.get("refs") if "version" in refs else refs
    per_protocol = {opts.remote_protocol: opts.remote_options or {}} if opts.remote_protocol else None
    reader = fsspec_range_reader(None if opts.remote_protocol else opts.remote_options, per_protocol)
    name = label or "refindex:" + str((refs.get("templates") or {}).get("u") or id(refs))
    return IndexStore(body, refs.get("templates"), reader, label=name)


def register_reader_codecs(index: Any) -> None:
    """Make the codecs an index names known here, as a reader would: refindex's own, and
    imagecodecs' (which ships no entry points; readers register its codecs), under the
    names of the index's zarr format."""
    from ...codecs import register_codecs, register_stock_codecs, register_v3_codecs

    register_codecs()
    register_stock_codecs()
    if not isinstance(index, dict) or zarr_format_of(index) == 3:  # (a parquet folder's is not read for this)
        register_v3_codecs()


def store_of(refs: Any, opts: ReadOptions):
    """A read-only zarr store over the index: an IndexStore for JSON indexes, else an ``FsspecStore``
    over fsspec's ReferenceFileSystem (parquet folders, and indexes with generators)."""
    import zarr

    if opts.index_url is None and not isinstance(refs, dict):
        opts = replace(opts, index_url=os.fspath(refs))
    loaded = load_refs(refs, opts.storage_options)
    register_reader_codecs(loaded)
    if isinstance(loaded, dict) and "gen" not in loaded:
        return index_store(loaded, opts)
    return zarr.storage.FsspecStore(reference_fs(loaded, opts), read_only=True, path="")


def store(refs: Any, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
          remote_protocol: str | None = None, allowed_urls: Sequence[str] | None = None, trust: bool = False):
    """A read-only zarr store over an index (no freshness check): :func:`store_of` with keywords."""
    return store_of(refs, ReadOptions.of(storage_options=storage_options, remote_options=remote_options,
                                         remote_protocol=remote_protocol, allowed_urls=allowed_urls, trust=trust,
                                         check_source=False))


def open(refs: Any, *, storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
         remote_protocol: str | None = None, check_source: bool = True, cache: CacheSetting = True,
         allowed_urls: Sequence[str] | None = None, trust: bool = False, group: str | None = None,
         branch: str | None = None, snapshot: str | None = None):
    """Open an index (dict, JSON path/URL or parquet folder) or an HDF5 file/URL as a read-only ``zarr.Group``.

    The hierarchy comes from the consolidated ``.zmetadata`` alone (one read, however deep
    the file), or per node when an index has none.  Keywords are those of :class:`ReadOptions`.

    An index read from elsewhere may make the reader fetch only what its rules allow (the
    table in :mod:`refindex.read.index._urlpolicy`: no local files from a remote index, no cloud
    metadata or private-network hosts ...); anything else is refused before any request with
    :class:`~refindex.UntrustedReference`.  ``allowed_urls`` (URL prefixes, or patterns
    where ``*`` stands for anything) widens that on purpose, ``trust=True`` turns it off.
    An HDF5 file opened directly is indexed here, and trusted.

    An Icechunk repository (a folder or ``s3://bucket/prefix``, or an
    :class:`~refindex.read.IcechunkIndex`) is opened read-only on ``branch`` (default main)
    or ``snapshot``, at ``group`` (default its root), authorizing exactly the virtual chunk
    containers it declares, with ``remote_options`` (default ``storage_options``) for the
    sources; ``storage_options`` reach the repository.  ``group`` ("a/b") opens that group of
    any other index or file too; one that is not there, or is a dataset, is a
    :class:`~refindex.errors.GroupNotFound` (a ``ValueError`` too) listing the groups there.
    """
    from ._consolidated import open_group

    ic = opened_icechunk(refs, storage_options=storage_options, remote_options=remote_options, group=group,
                         branch=branch, snapshot=snapshot, check_source=check_source, groups_elsewhere=True)
    if ic is not None:
        return ic.zarr_group()

    loaded, opts = prepare(refs, ReadOptions.of(storage_options=storage_options, remote_options=remote_options,
                                                remote_protocol=remote_protocol, check_source=check_source,
                                                cache=cache, allowed_urls=allowed_urls, trust=trust))
    root = open_group(store_of(loaded, opts))
    return subgroup(root, group, index_location(refs) or "the index") if (group or "").strip("/") else root


def subgroup(root: Any, group: str, label: str) -> Any:
    """The group ``group`` ("a/b") of the zarr group ``root``; :class:`~refindex.errors.GroupNotFound`
    (a ``ValueError`` too) naming what is there instead and the groups of its nearest parent."""
    import zarr

    from ...errors import GroupNotFound

    try:
        found = root[group.strip("/")]
    except KeyError:
        found = None
    if isinstance(found, zarr.Group):
        return found
    kinds = {"": "group"} | {p: "group" if isinstance(m, zarr.Group) else "array"
                             for p, m in root.members(max_depth=None)}
    raise GroupNotFound.naming(group, kinds, file=label)


def index_location(refs: Any) -> str | None:
    """Where an index given as a path or URL lives (None for a dict): files it names are beside it."""
    return None if isinstance(refs, dict) else os.fspath(refs)


def opened_icechunk(refs: Any, *, storage_options: dict[str, Any] | None = None,
                    remote_options: dict[str, Any] | None = None, group: str | None = None,
                    branch: str | None = None, snapshot: str | None = None, check_source: bool = True,
                    groups_elsewhere: bool = False) -> Any:
    """``refs`` as an :class:`~refindex.read.IcechunkIndex` checked against its source (StaleIndexError
    when it changed), or None when ``refs`` is no Icechunk repository (``groups_elsewhere``: as
    :func:`~refindex.read.index._icechunk.icechunk_index`'s)."""
    if isinstance(refs, dict) or (group is None and branch is None and snapshot is None and named_otherwise(refs)):
        return None  # Icechunk's reader not imported
    from ..index._icechunk import icechunk_index

    ic = icechunk_index(refs, storage_options=storage_options, source_options=remote_options, group=group,
                        branch=branch, snapshot=snapshot, groups_elsewhere=groups_elsewhere)
    if ic is not None and check_source:
        from ..freshness import check_source as _check

        _check(ic.as_refs(), storage_options=ic.source_options if ic.source_options is not None
               else ic.storage_options)
    return ic
