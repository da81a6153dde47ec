"""The options of a scan, as one typed object that travels from the edge (API, CLI, batch) inward.

:class:`ScanOptions` holds what decides an index's content (recorded in its provenance)
and how the source is read; :class:`FetchOptions` (its ``fetch``) tunes how a remote file's bytes
are fetched into the block cache a scan reads through.  Callers
build one at the edge (``ScanOptions(...)``, or :meth:`ScanOptions.from_keywords` for the
keyword style of ``refindex.scan``) and every layer reads the fields it needs.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypedDict

MiB = 1 << 20
Convention = Literal["auto", "hdmf", "plain"]
OnUnsupported = Literal["error", "skip"]
ZarrFormat = Literal[2, 3]
ZARR_FORMATS = (2, 3)

# The one time limit of an isolated scan, whoever asks for it (refindex scan, refindex batch,
# isolate=True in Python, the VirtualiZarr parser); ``timeout`` / --timeout overrides it.
MIN_TIME_LIMIT = 60.0  # seconds: any file, however small (remote round trips included)
SLOWEST_READ = 2 * MiB  # bytes/s: the limit lets a scan read the whole file this slowly
REMOTE_TIME_LIMIT = 600.0  # seconds: remote files, whose size is not known before they are opened
STALL_LIMIT = 10.0  # seconds a worker may go without a pulse (refindex.feedback.progress) while libhdf5 reads a local file
REMOTE_STALL_LIMIT = 60.0  # the same for a remote file
TIME_LIMIT_POLICY = ("1 s per 2 MiB of the input, at least 60 s; 600 s for a remote input; and while libhdf5 "
                     "reads the file, 10 s without progress (60 s remote)")


def time_limit(size: int | None) -> float:
    """Default time limit of one isolated scan of a file of ``size`` bytes (None: a remote file).

    A scan reads the file's metadata, not its data, and healthy files index at tens of
    MB/s or more on a local disk; even a file of tiny chunks (metadata as big as the data)
    took 13 s for 10^7 chunks.  The limit lets the scan read the *whole* file at 2 MiB/s,
    and never less than a minute: one second per 2 MiB, at least 60 s (a 1 GiB file: 512 s).
    Remote files: 600 s, as their size is unknown until opened and the network sets the pace.
    """
    if size is None:
        return REMOTE_TIME_LIMIT
    return max(MIN_TIME_LIMIT, float(round(size / SLOWEST_READ)))


def stall_limit_of(source: Any, timeout: float | None = None) -> float | None:
    """How long the worker of an isolated scan of ``source`` may go without a pulse (held by libhdf5 in
    one call, :mod:`refindex.feedback.progress`) before it is stopped: :data:`STALL_LIMIT`, remote files
    :data:`REMOTE_STALL_LIMIT`.  A ``timeout`` given on purpose replaces both limits (None)."""
    import os

    from . import urls

    if timeout:
        return None
    return STALL_LIMIT if urls.is_local(os.fspath(source)) else REMOTE_STALL_LIMIT


def time_limit_of(source: Any) -> float:
    """:func:`time_limit` of ``source``: a local file by its size (a missing one: the minimum), a URL as remote."""
    import os

    from . import urls

    source = os.fspath(source)
    if not urls.is_local(source):
        return time_limit(None)
    try:
        return time_limit(os.path.getsize(urls.split(source)[1]))
    except OSError:
        return time_limit(0)  # missing or unreadable: the worker reports that at once


@dataclass
class FetchOptions:
    """How a remote file's bytes are fetched into the block cache a scan reads through
    (:class:`refindex.source.BlockCache`; formerly ``CacheOptions``, a name still accepted).

    Defaults are tuned on pynwb files behind 30 ms / 50 MB/s (benchmarks/p2_remote_index.py,
    p4_notebook_open.py): their metadata sits in a few KiB at the start, a few hundred KiB
    at the end and islands in between (or, with many small objects, all over the file).
    A round trip costs as much as ~1.5 MB of transfer there, so on open the head and tail
    are fetched at once (concurrently, with the size and etag), and each later miss
    fetches its block plus ``ahead`` blocks after it in one request.

    ``block_size``: granularity of fetches and of the cache.  ``first_read``: bytes
    fetched at the start of the file on open (superblock, root group).  ``tail_read``:
    bytes fetched at the end on open, in parallel with ``first_read`` (libhdf5 writes
    metadata flushed at close there).  ``neighbours``: extra blocks fetched on each side
    of a miss.  ``ahead``: more blocks fetched after a miss: libhdf5 allocates space at
    the end of the file as it writes, so what an object gained after it was made
    (continuation blocks of attributes added later, B-tree nodes, grown heaps) lies
    after it, seldom before (the P4 many-object file: 7 round trips with one block either
    side, 6 with two ahead; a file of many chunk B-trees: 74 -> 50, the same bytes).
    ``max_gap``: missing blocks separated by at most this many cached bytes
    are still fetched in one request.  ``prefetch_metadata``: before the scan, walk the
    group tree level by level and fetch each level's object headers, group B-trees, heaps
    and chunk B-tree roots in concurrent batches (see :mod:`refindex.source`), instead
    of one round trip per scattered structure during the scan.  ``whole_file_max``: in a file
    no larger than this, once the blocks a scan needs reach a third of the file, the rest
    is fetched in that same round trip (as concurrent parts): the metadata of many small
    objects lies all over such a file, and the scan would fetch most of it anyway, one
    tree level per round trip.  ``concurrency``: requests in flight at most in one round
    trip (a level of a big chunk index is thousands of ranges); the filesystem's connection
    pool may allow fewer (aiohttp's default for fsspec's http: 100; s3fs: botocore's
    ``max_pool_connections``, 10 unless raised).
    """

    block_size: int = 64 << 10
    first_read: int = 1 << 20
    tail_read: int = 1 << 20
    neighbours: int = 0
    ahead: int = 2
    max_gap: int = 0
    prefetch_metadata: bool = True
    whole_file_max: int = 64 << 20
    concurrency: int = 128

    def end_spans(self) -> list[tuple[int, int | None]]:
        """What an open fetches with the file's info: its first ``first_read`` bytes and, as a
        suffix range (the size is not known yet), its last ``tail_read`` bytes and a block."""
        return [(0, self.first_read), (-(self.tail_read + self.block_size), None)]


# What an index of the same file with the same options holds, counted: raised with every change of it (2: NWB
# files' fill values and dimension names as xarray reads them over the file; 3: a null dataspace an empty
# array of shape (0,), not a 0-d array that read as 0; a server without Range support recorded), so that
# neither the index cache nor a batch re-run takes an index made before as current (the package's version
# does not change between such changes during development).
INDEX_FORM = 3

# The fields that decide what an index holds, in the order its provenance lists them.
RECORDED = ("inline_threshold", "inline_dataset_threshold", "inline_max", "contiguous_chunk_bytes",
            "on_unsupported", "allowed_root", "allow_outside", "max_inline_total", "check_sample", "portable",
            "pages", "page_size")
PAGE_SIZE = 1  # bytes; chosen by measurement (docs/h5py.md): smaller pages carry less data beside metadata


@dataclass
class ScanOptions:
    """Everything that shapes one scan.

    What the index holds: ``inline_threshold`` (chunks stored in fewer bytes are copied
    in), ``inline_dataset_threshold`` (datasets whose chunks take fewer bytes in all are
    copied in whole), ``inline_max`` (most bytes one dataset may add when its values must
    be inline: vlen data, filters without codec), ``contiguous_chunk_bytes`` (contiguous
    datasets above this become virtual chunks of about this size; None: never),
    ``on_unsupported`` ("skip" records what cannot be represented instead of failing),
    ``allowed_root``/``allow_outside`` (where other files may be: default the scanned
    file's folder), ``max_inline_total`` (inline bytes of the whole index),
    ``check_sample`` (compare a sample of chunks with libhdf5's reads; None: local files
    only), ``convention`` ("auto", "hdmf" or "plain"), ``portable`` (datasets whose stored
    chunks only refindex's own codecs decode are copied in, decoded, within ``inline_max``
    — or fail — so the index opens with numcodecs and imagecodecs alone), ``zarr_format``
    (2: ``.zarray``/``.zgroup`` metadata, the default; 3: ``zarr.json`` documents, chunk
    keys ``c/i/j``, recorded as ``"zarr_format": 3``), ``pages`` (the index carries the HDF5
    metadata pages the scan read, in pages of ``page_size`` bytes, so libhdf5 opens the file from
    the index: :func:`refindex.h5py_file`; False leaves them out).

    How it is made (not recorded): ``url`` (what the references point at, when not the
    source), ``storage_options`` (fsspec, never written into an index), ``fetch``
    (:class:`FetchOptions`: how a remote file's bytes are fetched; ``cache`` is its former name,
    still accepted with a DeprecationWarning),
    ``follow_external`` (also index files external links point into), ``isolate`` /
    ``timeout`` (run libhdf5 in a worker process killed after ``timeout`` seconds; None:
    :data:`TIME_LIMIT_POLICY`),
    ``split_walk`` (share the walk of a remote file of many groups with a forked helper
    process: None when it pays, True whenever possible, False never; see
    :mod:`refindex.scanner._split`), ``native_index`` (list chunks with refindex's own readers of
    libhdf5's chunk indexes, a tree level per round trip; False: libhdf5's ``chunk_iter`` for every
    dataset; the index is the same either way, see docs/scale.md).
    """

    inline_threshold: int = 256
    inline_dataset_threshold: int = 16 << 10
    inline_max: int = 64 * MiB
    contiguous_chunk_bytes: int | None = 32 * MiB
    on_unsupported: OnUnsupported = "error"
    allowed_root: str | None = None
    allow_outside: bool = False
    max_inline_total: int | None = 256 * MiB
    check_sample: bool | None = None
    portable: bool = False
    convention: Convention = "auto"
    zarr_format: ZarrFormat = 2
    pages: bool = True
    page_size: int = PAGE_SIZE
    url: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    fetch: FetchOptions = field(default_factory=FetchOptions)
    follow_external: bool = False
    isolate: bool = False
    timeout: float | None = None
    split_walk: bool | None = None
    native_index: bool = True

    def __post_init__(self) -> None:
        if self.zarr_format not in ZARR_FORMATS:
            raise ValueError(f"zarr_format must be 2 or 3, not {self.zarr_format!r}")

    def recorded(self) -> dict[str, Any]:
        """The fields that decide the index's content, as its provenance records them.

        ``zarr_format`` is listed for format 3 only: a v2 index records what it always did
        (its bytes stay as they were), and v2 and v3 scans never share a cache entry.
        """
        out = {name: getattr(self, name) for name in RECORDED}
        if self.zarr_format != 2:
            out["zarr_format"] = self.zarr_format
        return out

    def but(self, **changes: Any) -> "ScanOptions":
        """A copy with ``changes`` (options are passed down, never modified in place)."""
        return replace(self, **changes)

    @classmethod
    def from_keywords(cls, **keywords: Any) -> "ScanOptions":
        """Options from ``refindex.scan``'s keywords: ``"default"`` keeps a field's default, and so
        does None, except for ``contiguous_chunk_bytes`` (None or 0: never split) and
        ``max_inline_total`` (None: no limit), where None is a choice of its own.
        """
        keywords = _without_cache(keywords)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise TypeError(f"unknown scan option(s): {', '.join(unknown)}")
        chosen: dict[str, Any] = {}
        for name, value in keywords.items():
            if isinstance(value, str) and value == "default":
                continue
            if value is None and name not in ("contiguous_chunk_bytes", "max_inline_total"):
                continue
            if value is None:
                chosen[name] = None
                continue
            if name == "contiguous_chunk_bytes":
                value = int(value) or None
            elif name in ("inline_threshold", "inline_dataset_threshold", "inline_max", "max_inline_total", "page_size"):
                value = int(value)
            elif name == "storage_options":
                value = dict(value)
            elif name == "zarr_format":
                value = int(value)
            chosen[name] = value
        return cls(**chosen)


class ScanKeywords(TypedDict, total=False):
    """The keyword form of :class:`ScanOptions` that ``refindex.scan`` and its siblings accept
    (None or ``"default"`` keeps a default; see :meth:`ScanOptions.from_keywords`)."""

    url: str | None
    storage_options: dict[str, Any] | None
    convention: Convention
    zarr_format: ZarrFormat
    inline_threshold: int | None
    inline_dataset_threshold: int | None
    inline_max: int | None
    contiguous_chunk_bytes: int | None | Literal["default"]
    on_unsupported: OnUnsupported
    allowed_root: str | None
    allow_outside: bool
    max_inline_total: int | None | Literal["default"]
    check_sample: bool | None
    portable: bool
    pages: bool
    page_size: int | None
    fetch: FetchOptions | None
    cache: FetchOptions | None  # the former name of ``fetch`` (deprecated)
    follow_external: bool
    isolate: bool
    timeout: float | None
    split_walk: bool | None


def options_from(options: ScanOptions | None, keywords: ScanKeywords) -> ScanOptions:
    """``options`` with ``keywords`` applied on top (or the keywords alone): the edge of every API call."""
    if options is None:
        return ScanOptions.from_keywords(**keywords)
    if not keywords:
        return options
    keywords = _without_cache(keywords)
    changes = ScanOptions.from_keywords(**keywords)
    return replace(options, **{k: getattr(changes, k) for k in keywords if not _kept_default(keywords[k], k)})


def _kept_default(value: Any, name: str) -> bool:
    return (isinstance(value, str) and value == "default") or (
        value is None and name not in ("contiguous_chunk_bytes", "max_inline_total"))


_CACHE_RENAMED = ("the scan option 'cache' is now 'fetch' (FetchOptions: how a remote file's bytes are fetched); "
                  "'cache' on the read side (refindex.open, h5py_file, open_nwb...) is the index cache folder")


_PACKAGE = (os.path.dirname(os.path.abspath(__file__)),)  # a warning names the first caller outside refindex


def _renamed_cache() -> None:
    warnings.warn(_CACHE_RENAMED, DeprecationWarning, skip_file_prefixes=_PACKAGE)


def _without_cache(keywords: Any) -> Any:
    """``keywords`` with the former ``cache`` given as ``fetch`` (warned once)."""
    if "cache" not in keywords:
        return keywords
    _renamed_cache()
    keywords = dict(keywords)
    cache = keywords.pop("cache")
    keywords.setdefault("fetch", cache)
    return keywords


def _cache_of(self: ScanOptions) -> FetchOptions:
    _renamed_cache()
    return self.fetch


def _accepting_cache(init: Any) -> Any:
    """``ScanOptions(cache=...)``, the former name of ``fetch``, still accepted (warned)."""

    @functools.wraps(init)
    def __init__(self: ScanOptions, *args: Any, cache: FetchOptions | None = None, **kwargs: Any) -> None:
        if cache is not None:
            _renamed_cache()
            kwargs.setdefault("fetch", cache)
        init(self, *args, **kwargs)

    return __init__


ScanOptions.__init__ = _accepting_cache(ScanOptions.__init__)  # type: ignore[method-assign]
ScanOptions.cache = property(_cache_of, doc="The former name of :attr:`fetch` (deprecated).")  # type: ignore[attr-defined]


def __getattr__(name: str) -> Any:
    if name == "CacheOptions":  # the former name of FetchOptions
        warnings.warn("refindex.options.CacheOptions is now FetchOptions", DeprecationWarning, skip_file_prefixes=_PACKAGE)
        return FetchOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
