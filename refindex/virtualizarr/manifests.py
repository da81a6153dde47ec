"""A scan's v3 hierarchy as VirtualiZarr objects: ``ChunkManifest``, ``ManifestArray``, ``ManifestGroup``, ``ManifestStore``.

Each array's ``zarr.json`` document (what refindex's v3 index states: data type, fill value,
codecs, dimension names, xarray's ``_FillValue`` encoding) becomes its ``ArrayV3Metadata``
unchanged, so VirtualiZarr's store decodes exactly what refindex's own v3 index does.  The
chunk table becomes a ``ChunkManifest`` scattered column-wise into VirtualiZarr's dense
grid arrays (paths as numpy ``StringDType``, offsets and lengths ``uint64``); inline chunks
are VirtualiZarr's *inlined* chunks (encoded bytes, path ``__inlined__``), which its
Icechunk writer stores as native chunks and its kerchunk writer as ``base64:`` values.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Iterable

import numpy as np
from obspec_utils.registry import ObjectStoreRegistry
from virtualizarr.manifests import ChunkManifest, ManifestArray, ManifestGroup, ManifestStore
from zarr.core.metadata.v3 import ArrayV3Metadata

from ..errors import GroupNotFound, RefindexError
from ..model import ChunkTable
from ..formats.v3 import V3Array
from .scan import Scan, as_uri

INLINED = "__inlined__"  # VirtualiZarr's path of an inlined chunk (virtualizarr.manifests.manifest)
MISSING = ""  # ... and of a chunk that is not stored (it reads as the fill value)
# VirtualiZarr's manifests are dense over the chunk grid (32 bytes and a string per cell, stored or not)
MAX_GRID_CELLS = 1 << 27


class RefindexManifestGroup(ManifestGroup):
    """VirtualiZarr's ``ManifestGroup`` with its member lists kept.

    VirtualiZarr's group is immutable but filters all its members on every ``arrays`` /
    ``groups`` call, and its store makes those calls for every key zarr reads: opening a
    group of N arrays cost O(N²) (~12 s for 2,000 arrays).
    """

    @cached_property
    def arrays(self) -> dict[str, ManifestArray]:  # type: ignore[override]
        return {k: v for k, v in self._members.items() if isinstance(v, ManifestArray)}

    @cached_property
    def groups(self) -> dict[str, ManifestGroup]:  # type: ignore[override]
        return {k: v for k, v in self._members.items() if isinstance(v, ManifestGroup)}


class RefindexManifestStore(ManifestStore):
    """VirtualiZarr's ``ManifestStore``, described in one line.

    zarr formats a store's ``str`` each time it opens an array, and VirtualiZarr's store
    prints its whole group there (every array's repr): opening a group of N arrays cost
    O(N²) (~140 s for 2,000 arrays).  Everything else is VirtualiZarr's own.
    """

    def __str__(self) -> str:
        g = self._group
        return f"ManifestStore(refindex: {len(g.arrays)} arrays, {len(g.groups)} groups)"

    __repr__ = __str__


def grid_shape(doc: dict[str, Any]) -> tuple[int, ...]:
    """The chunk grid of an array ``zarr.json`` document (ceil(shape / chunk shape) per axis)."""
    chunks = doc["chunk_grid"]["configuration"]["chunk_shape"]
    return tuple(-(-int(s) // int(c)) for s, c in zip(doc["shape"], chunks))


def chunk_manifest(doc: dict[str, Any], chunks: V3Array, file_uri: str, *, path: str = "") -> ChunkManifest:
    """The ``ChunkManifest`` of one array, scattered column-wise from its chunk table.

    Every grid cell starts missing; referenced chunks take their file's URI (the distinct
    files as one ``StringDType`` array, indexed per row: ``file_uri`` for the scanned file),
    inline chunks the inlined marker and their encoded bytes.
    """
    grid = grid_shape(doc)
    cells = int(np.prod(grid, dtype=np.float64))
    if cells > MAX_GRID_CELLS:
        raise RefindexError(f"a chunk grid of {cells:.3g} cells: VirtualiZarr's manifests are dense, so this array "
                            f"would take {cells * 48 / 2**30:.0f} GiB in memory", path=path or None)
    paths = np.full(grid, MISSING, dtype=np.dtypes.StringDType())
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    table = chunks.refs
    if table is not None and len(table):
        files, row_file = table.row_urls()
        names = np.array([as_uri(u) if u else file_uri for u in files], dtype=np.dtypes.StringDType())
        if grid:
            where = tuple(table.coords.T)
            paths[where] = names[row_file]
            offsets[where] = table.offsets
            lengths[where] = table.sizes
        else:  # a 0-d array: its one chunk
            paths[()] = names[row_file[0]]
            offsets[()] = table.offsets[0]
            lengths[()] = table.sizes[0]
    inlined: dict[tuple[int, ...], bytes] = {}
    for key, data in chunks.inline.items():
        at = tuple(int(i) for i in key.split("/")[1:])  # "c/0/1" -> (0, 1); "c" -> ()
        inlined[at] = bytes(data)
        paths[at] = INLINED
        offsets[at] = 0
        lengths[at] = len(data)
    return ChunkManifest.from_arrays(paths=paths, offsets=offsets, lengths=lengths, inlined=inlined or None,
                                     validate_paths=False)


def trimmed(doc: dict[str, Any], chunks: V3Array) -> tuple[dict[str, Any], V3Array]:
    """An array whose chunk is longer than the array along an extendible axis, with its chunk cut to
    the array where the cut part is a prefix of the stored bytes (no codec but ``bytes``, the axes
    before the cut one of chunk length 1, those after it whole), as VirtualiZarr's own HDF parser
    does: a virtual dataset of such chunks concatenates with others along that axis (a netCDF
    record dimension).  Anything else is returned unchanged (it reads right, uncut).
    """
    shape = [int(s) for s in doc["shape"]]
    chunk = [int(c) for c in doc["chunk_grid"]["configuration"]["chunk_shape"]]
    cut = [min(c, max(s, 1)) for c, s in zip(chunk, shape)]
    if cut == chunk or [c["name"] for c in doc["codecs"]] != ["bytes"]:
        return doc, chunks
    axis = next(i for i, (a, b) in enumerate(zip(cut, chunk)) if a < b)
    if any(c != 1 for c in chunk[:axis]) or cut[axis + 1:] != chunk[axis + 1:]:
        return doc, chunks
    itemsize = ArrayV3Metadata.from_dict(doc).dtype.to_native_dtype().itemsize
    nbytes = int(np.prod(cut, dtype=np.int64)) * itemsize
    new = dict(doc, chunk_grid={"name": "regular", "configuration": {"chunk_shape": cut}})
    table = chunks.refs
    if table is not None and len(table):
        if (table.sizes < nbytes).any():  # a stored chunk shorter than its prefix: not the layout assumed
            return doc, chunks
        table = ChunkTable(table.coords, table.offsets, np.full(len(table), nbytes, np.uint64), table.url,
                           table.urls, table.url_index)
    return new, V3Array(table, {k: bytes(v[:nbytes]) for k, v in chunks.inline.items()})


def manifest_group(scan: Scan, group: str | None = None, drop_variables: Iterable[str] = ()) -> ManifestGroup:
    """The hierarchy as nested ``ManifestGroup``s, rooted at ``group`` ("/a/b"; None: the file's root).

    ``drop_variables``: arrays of that group left out (before their manifests are built).
    """
    docs = scan.hierarchy.documents
    root = (group or "").strip("/")
    if docs.get(root, {}).get("node_type") != "group":  # (a ValueError too, as VirtualiZarr's HDF parser raises)
        raise GroupNotFound.naming(group or "/", {k: d["node_type"] for k, d in docs.items()}, file=scan.url)
    file_uri = as_uri(scan.url)
    children: dict[str, list[str]] = {}
    for key in docs:
        if key and (not root or key.startswith(root + "/")):
            children.setdefault(key.rpartition("/")[0], []).append(key)
    dropped = set(drop_variables)

    def build(key: str) -> ManifestGroup:
        arrays, groups = {}, {}
        for child in children.get(key, []):
            name = child.rpartition("/")[2]
            doc = docs[child]
            if doc["node_type"] == "group":
                groups[name] = build(child)
            elif not (key == root and name in dropped):
                doc, stored = trimmed(doc, scan.hierarchy.arrays[child])
                manifest = chunk_manifest(doc, stored, file_uri, path="/" + child)
                arrays[name] = ManifestArray(ArrayV3Metadata.from_dict(doc), manifest)
        return RefindexManifestGroup(arrays=arrays, groups=groups, attributes=dict(docs[key]["attributes"]))

    return build(root)


def manifest_store(scan: Scan, registry: ObjectStoreRegistry | None = None, group: str | None = None,
                   drop_variables: Iterable[str] = ()) -> ManifestStore:
    """A VirtualiZarr ``ManifestStore`` of a scan; referenced chunks are read through ``registry``."""
    return RefindexManifestStore(group=manifest_group(scan, group, drop_variables), registry=registry)
