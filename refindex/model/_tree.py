"""The scanner's model of one file: groups, arrays with numpy chunk tables, links.

It says what the index must contain (zarr v2 metadata, chunk references, inline
bytes, links) without any knowledge of HDF5 APIs or JSON layout.  Chunk references
are held as numpy arrays so a dataset with millions of chunks costs a few arrays,
not millions of Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._document import V2_KEYS

@dataclass
class ChunkTable:
    """Byte ranges of stored chunks of one array.

    ``coords`` is an ``(n, ndim)`` int64 array of chunk-grid indices, ``offsets`` and
    ``sizes`` are uint64 byte ranges in ``url`` (``None`` means the scanned file).
    A table whose chunks lie in several files (a virtual dataset referencing its
    source files) has ``url_index``: row ``i`` is in ``urls[url_index[i]]``.
    """

    coords: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    url: str | None = None
    urls: list[str | None] | None = None  # None entries: the scanned file
    url_index: np.ndarray | None = None  # int32 per row, into ``urls``

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    @classmethod
    def empty(cls, ndim: int) -> "ChunkTable":
        return cls(
            np.zeros((0, ndim), dtype=np.int64),
            np.zeros(0, dtype=np.uint64),
            np.zeros(0, dtype=np.uint64),
        )

    def take(self, mask: np.ndarray) -> "ChunkTable":
        if mask.dtype == bool and mask.all():
            return self  # tables are never modified in place: no copy of millions of rows
        index = self.url_index[mask] if self.url_index is not None else None
        return ChunkTable(self.coords[mask], self.offsets[mask], self.sizes[mask], self.url, self.urls, index)

    def all_urls(self) -> list[str | None]:
        """Every file this table points into (``None``: the scanned file)."""
        return list(self.urls) if self.url_index is not None and self.urls is not None else [self.url]

    def row_urls(self) -> tuple[list[str | None], np.ndarray]:
        """(urls, int32 index per row): the per-row file of every chunk, single-file tables too."""
        if self.url_index is not None and self.urls is not None:
            return list(self.urls), self.url_index
        return [self.url], np.zeros(len(self), dtype=np.int32)

    @classmethod
    def concat(cls, tables: list["ChunkTable"], ndim: int) -> "ChunkTable":
        """One table of the rows of ``tables``, each keeping its own file."""
        if not tables:
            return cls.empty(ndim)
        position: dict[str | None, int] = {}  # file -> its index in the merged ``urls``
        parts = []
        for t in tables:
            t_urls, t_index = t.row_urls()
            remap = np.asarray([position.setdefault(u, len(position)) for u in t_urls], dtype=np.int32)
            parts.append(remap[t_index] if len(t_index) else np.zeros(0, np.int32))
        urls = list(position)
        coords = np.concatenate([t.coords for t in tables]).reshape(-1, ndim)
        offsets = np.concatenate([t.offsets for t in tables]).astype(np.uint64)
        sizes = np.concatenate([t.sizes for t in tables]).astype(np.uint64)
        if len(urls) == 1:
            return cls(coords, offsets, sizes, urls[0])
        return cls(coords, offsets, sizes, None, urls, np.concatenate(parts).astype(np.int32))

    @property
    def nbytes_referenced(self) -> int:
        return int(self.sizes.sum()) if len(self) else 0


@dataclass
class ArrayNode:
    """A zarr v2 array: metadata plus where each chunk's bytes live."""

    path: str  # HDF5 path, "/a/b"
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: Any  # zarr v2 dtype: a string such as "<i4" or a list of fields
    fill_value: Any  # already JSON-encoded the way zarr v2 expects
    compressor: dict | None = None
    filters: list[dict] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    refs: ChunkTable | None = None  # chunks read from a file
    inline: dict[str, bytes] = field(default_factory=dict)  # chunk key -> encoded bytes
    # What the data is, for conventions (e.g. "int16", "str", "object", "region", or a
    # list of {"name", "dtype"} for compounds).
    kind: Any = None
    scalar: bool = False  # HDF5 scalar dataspace (shape ())
    charset: str | None = None  # text: "utf-8" or "ascii", as HDF5 states it (what netCDF readers decode by)
    object_id: str | None = None
    # Dimension names a zarr v3 index states in ``dimension_names`` (set by the v3 conventions;
    # v2 indexes carry them in the ``_ARRAY_DIMENSIONS`` attribute only).
    dimension_names: list[str] | None = None
    # numpy types of the attributes whose JSON form loses them (:func:`refindex.codecs.lost_type`): name -> dtype.str
    attr_types: dict[str, str] = field(default_factory=dict)


@dataclass
class LinkNode:
    """A name that points at another object instead of holding one."""

    name: str  # link name inside its parent group
    parent: str  # HDF5 path of the parent group
    kind: str  # "soft", "hard", "external" or "user-defined"
    target: str | None  # path of the target inside its file
    file: str | None = None  # external file as written in the link
    target_object_id: str | None = None
    resolved: bool = True  # False: dangling or unreachable
    target_root_object_id: str | None = None  # external links: object_id of the other file's root


@dataclass
class NcMember:
    """What netCDF readers (h5netcdf) read of one dataset member of a group to name dimensions.

    Recorded by the scanner for files the plain convention may serve (never written into an
    index): the plain convention names each array's dimensions from these facts the way
    h5netcdf does (:mod:`refindex.conventions._ncdims`).
    """

    name: str  # the member's name in its group (a link's name for a linked dataset)
    shape: tuple[int, ...] | None  # None: null dataspace
    scale: bool = False  # CLASS is b"DIMENSION_SCALE": a netCDF dimension
    dimension_only: bool = False  # netCDF-4's placeholder scale: a dimension, not a variable
    dimid: int | None = None  # _Netcdf4Dimid
    coordinates: list[int] | None = None  # _Netcdf4Coordinates
    scales: list[list[str]] | None = None  # per axis, the names of its attached scales (None: no DIMENSION_LIST)
    size: int = 0  # a scale's dimension size (unlimited: the longest axis of the datasets using it)
    unlimited: bool = False  # a scale whose maxshape is (None,)


@dataclass
class GroupNode:
    path: str
    attrs: dict[str, Any] = field(default_factory=dict)
    object_id: str | None = None
    attr_types: dict[str, str] = field(default_factory=dict)  # as ArrayNode.attr_types
    # Dataset members in the order h5py lists them, for netCDF's view (None: not recorded).
    nc_members: list[NcMember] | None = None


@dataclass
class Tree:
    """Everything found in one file, keyed by HDF5 path."""

    url: str
    groups: dict[str, GroupNode] = field(default_factory=dict)
    arrays: dict[str, ArrayNode] = field(default_factory=dict)
    links: list[LinkNode] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    root_object_id: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    pages: Pages | None = None  # the file's metadata, for libhdf5 (see Pages)
    # Datasets whose values libhdf5 reads from other files (virtual datasets with sources elsewhere).
    reads_elsewhere: list[str] = field(default_factory=list)
    # Where chunks copied in whole came from: (offset in the file, size, array path, chunk key); compact
    # datasets' data lies in their object header: (the header's address, -1, path, chunk key).
    copied: list[tuple[int, int, str, str]] = field(default_factory=list)


def is_hdmf_root(names: Any) -> bool:
    """Do the root attribute ``names`` say the file was written by HDMF (NWB)?"""
    names = set(names)
    return ".specloc" in names or ("namespace" in names and "neurodata_type" in names)


def join(parent: str, name: str) -> str:
    return ("" if parent == "/" else parent) + "/" + name


def chunk_key(coords) -> str:
    """zarr v2 chunk key of grid position ``coords``: "i.j.k" ("0" for a scalar)."""
    return ".".join(str(int(c)) for c in coords) if len(coords) else "0"


def chunk_keys(coords: np.ndarray) -> list[str]:
    """:func:`chunk_key` of every row of an (n, ndim) coordinate array, built column-wise."""
    n, ndim = coords.shape
    if ndim == 0:
        return ["0"] * n
    cols = [coords[:, i].tolist() for i in range(ndim)]
    return list(map(".".join(["{}"] * ndim).format, *cols))


def inline_rows(coords: np.ndarray, model_keys: Any) -> np.ndarray:
    """Which rows of an (n, ndim) chunk coordinate table name a chunk that also has an inline entry
    under one of ``model_keys`` (model keys: ``"i.j"``, ``"0"`` for a 0-d array), as a boolean mask.

    Column-wise (one linear index per row, one ``isin``): no key text per chunk, which is what a
    writer pays otherwise on every array holding both referenced and inline chunks.
    """
    n, ndim = coords.shape
    keys = list(model_keys)
    if not n or not keys:
        return np.zeros(n, bool)
    if ndim == 0:
        return np.full(n, "0" in keys)
    try:
        inl = np.array([[int(p) for p in k.split(".")] for k in keys], dtype=np.int64)
    except (ValueError, OverflowError):  # not numbers, ragged, or beyond int64: compared as text below
        inl = np.zeros((0, ndim), np.int64)
    table = coords.astype(np.int64, copy=False)
    if inl.shape != (len(keys), ndim) or (inl < 0).any() or (table < 0).any():  # not grid keys: compare text
        wanted = set(keys)
        return np.fromiter((k in wanted for k in V2_KEYS.keys(coords)), dtype=bool, count=n)
    dims = np.maximum(table.max(axis=0), inl.max(axis=0)) + 1
    if float(np.prod(dims.astype(np.float64))) >= 2.0**62:  # a linear index would overflow
        wanted = {tuple(r) for r in inl.tolist()}
        return np.fromiter((tuple(r) in wanted for r in table.tolist()), dtype=bool, count=n)
    linear = np.ravel_multi_index(tuple(table.T), tuple(int(d) for d in dims))
    return np.isin(linear, np.ravel_multi_index(tuple(inl.T), tuple(int(d) for d in dims)))
