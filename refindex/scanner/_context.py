"""What every part of a scan shares: one :class:`ScanContext` per scanned file.

The layouts, attribute readers and the walk are functions over a context rather than
methods of one scanner class, so a virtual dataset's source file is indexed by the same
functions with a context of its own.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from typing import Any, Callable

import h5py

from .. import urls
from ..checks.compare import object_key
from ..errors import RefindexError, UnsupportedError
from ..model import ArrayNode, ChunkTable, Tree, is_hdmf_root
from ..options import ScanOptions
from ..feedback.progress import NoProgress, Progress
from ._objects import wrapped
from .chunkindex import FileFacts, IndexStats, Unparsed
from ..source import INDEX_PREFIX, META, ReadRecorder

# (url or None for the scanned file, offsets, sizes) -> the bytes of each range, in few requests
ReadMany = Callable[[str | None, list[int], list[int]], list[bytes]]
# url -> (fsspec filesystem, path) for other files (external storage, virtual dataset sources)
FsFor = Callable[[str], tuple[Any, str]]


def filters_decodable(dcpl: Any | None = None) -> None:
    """Let libhdf5 decode the filters of a dataset (``dcpl``; None: any dataset, such as a virtual
    one's sources): what the scan inlines and what its checks compare with.  hdf5plugin, whose
    import (~20 ms) is most of what a small remote scan waits for besides its requests, is
    imported the first time a pipeline holds a filter libhdf5 does not have."""
    if dcpl is None or any(not h5py.h5z.filter_avail(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())):
        _filter_plugins()


@cache
def _filter_plugins() -> None:
    try:
        import hdf5plugin  # noqa: F401  (registers its filters with libhdf5)
    except ImportError:  # pragma: no cover
        pass


def _local_fs(url: str) -> tuple[Any, str]:
    return urls.filesystem(url)


def _stock(codec_id: str) -> bool:
    from ..codecs import stock

    return stock(codec_id)


@dataclass
class ScanContext:
    """One scanned file: the open file, where references point, options, the tree being built."""

    f: h5py.File
    url: str  # what the references point at
    file_size: int
    opts: ScanOptions
    read_many: ReadMany
    fs_for: FsFor = _local_fs
    label: str = ""  # how errors name the file (the URL it was read from)
    # A portable index names only codecs its readers have: the chosen format says which (refindex.formats)
    stock_codec: Callable[[str], bool] = _stock
    progress: Progress = field(default_factory=NoProgress)
    tree: Tree = field(init=False)
    canonical: dict[tuple, str] = field(default_factory=dict)  # object identity -> its first path
    phony: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # group -> (phony dim name, size)
    dimids: dict[int, str] | None = None  # netCDF-4 dimension ids -> names, found when first needed
    ref_names: dict[tuple, str] = field(default_factory=dict)  # object identity -> libhdf5's name for it
    ref_targets: dict[tuple, tuple] = field(default_factory=dict)  # object identity -> (path, object_id) of references
    nc_view: bool = False  # attributes as netCDF readers show them (files the plain convention may serve)
    # Small chunks to copy into the index, read together once the walk is done.
    deferred: list[tuple[ArrayNode, ChunkTable]] = field(default_factory=list)
    index_stats: IndexStats = field(default_factory=IndexStats)  # which reader listed each dataset's chunks
    index_facts: FileFacts | Unparsed | None = None  # sizes and base address for the native index readers
    # (offset, bytes) of this file's ranges copied into the index: part of what its fingerprint covers
    copied: list[tuple[int, bytes]] = field(default_factory=list)
    # Notes what the scan reads, for the pages its index carries (None: no pages).
    recorder: ReadRecorder | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.url
        self.tree = Tree(url=self.url)

    def fail(self, path: str | None, reason: str, exc: type[RefindexError] = UnsupportedError) -> RefindexError:
        """The error to raise for ``path`` (``exc(reason)`` naming this file and that object)."""
        return exc(reason, file=self.label, path=path)

    def read_file(self, url: str | None, start: int, length: int) -> bytes:
        """Bytes of the scanned file (``url`` None or its own URL) or of another file."""
        return self.read_many(None if url in (None, self.url) else url, [start], [length])[0]

    def header_addresses(self) -> list[int]:
        """The file offsets of the object headers of every object the walk found (HDF5 addresses count
        from the superblock, which a user block moves)."""
        base = int(getattr(self.f, "userblock_size", 0) or 0)
        return [base + key[1][0] for key in self.canonical if isinstance(key[1], tuple) and key[1]]

    def reading(self, what: str, path: str | None = None) -> AbstractContextManager:
        """Reads made inside serve ``what`` for the pages of the index: ``"index"`` (a chunk index
        walk), ``"data"`` (values copied in), ``"meta"`` (metadata read once for many datasets, such as
        the superblock: whichever dataset's walk reads it first must not claim it); ``path`` names the dataset."""
        if self.recorder is None:
            return nullcontext()
        if what == "meta":
            return self.recorder.tagged(META)
        return self.recorder.tagged((INDEX_PREFIX if what == "index" else what + ":") + (path or ""))

    def checking(self) -> AbstractContextManager:
        """Reads made inside only check values against libhdf5 (they are left out of the pages)."""
        return self.recorder.paused() if self.recorder is not None else nullcontext()

    def canonical_path(self, obj: Any) -> str:
        """The path an object (h5py's, or a low-level id) is indexed under (its first name, sorted depth-first)."""
        return self.canonical.get(object_key(obj)) or (obj if isinstance(obj, h5py.HLObject) else wrapped(obj)).name

    @cached_property
    def hdmf(self) -> bool:
        """Will the hdmf conventions apply (forced, or the root says HDMF wrote the file)?

        Fixed-length text they state as text must then be in the index (see :func:`build_array`).
        """
        if self.opts.convention != "auto":
            return self.opts.convention == "hdmf"
        try:
            return is_hdmf_root(self.f.attrs.keys())
        except Exception:
            return False

    @property
    def remote(self) -> bool:
        """Is the scanned file read through fsspec from another machine (not a local path)?"""
        return not urls.is_local(self.label)

    def want_sample_check(self) -> bool:
        """Compare sampled chunks with libhdf5's reads? (default: local files only, remotely each is a request)"""
        opt = self.opts.check_sample
        return (not self.remote) if opt is None else bool(opt)

    def for_file(self, f: h5py.File, url: str, file_size: int) -> "ScanContext":
        """A context for a virtual dataset's source file (maybe this one), read the way this one
        is read; its chunks are checked against the virtual dataset's values, not on their own."""
        read_many = self.read_many
        if url != self.url:
            outer = self.read_many

            def read_many(u: str | None, offsets: list[int], sizes: list[int]) -> list[bytes]:
                return outer(url if u is None else u, offsets, sizes)

        return ScanContext(f, url, file_size, replace(self.opts, check_sample=False), read_many, self.fs_for,
                           label=url, stock_codec=self.stock_codec, progress=self.progress,
                           index_stats=self.index_stats,
                           recorder=self.recorder if f is self.f else None)


def fill_value_of(d: h5py.Dataset, nd: Any) -> Any:
    """HDF5's fill value of ``d`` (zeros of ``nd`` where libhdf5 cannot say)."""
    import numpy as np

    try:
        return d.fillvalue
    except Exception:
        return np.zeros((), nd)[()]
