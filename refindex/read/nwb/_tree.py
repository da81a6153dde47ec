"""The zarr groups and arrays of an index, made from its consolidated metadata, for hdmf-zarr.

hdmf-zarr builds an NWB file by walking it object by object, and each call it makes
into zarr crosses to zarr's event-loop thread (about 0.3 ms) and asks the store for
keys; a file of a thousand objects spent most of its open there.  Everything that
walk needs is in the index, in memory.  :class:`ZarrTree` makes the zarr groups and
arrays from the index's consolidated metadata without reading the store (the IO classes
of :mod:`._io` hand them to hdmf-zarr).  Arrays are still zarr arrays, so data stays lazy
and chunks are fetched concurrently, but three read patterns are served from memory,
after values read through zarr itself:

* every 0-d dataset (hdmf reads all of them while building), read in one batch;
* an array read a second time, when it is small (:data:`SMALL_ARRAY_BYTES`): what
  hdmf does with table columns, one row at a time;
* table columns (``VectorData``, ``VectorIndex`` ...) up to :data:`TABLE_COLUMN_BYTES`.

These go through zarr's public selection methods on the array instance; anything
they do not cover (fields, ``out=``, several fancy axes) is left to zarr.
"""

from __future__ import annotations

import json
import weakref
from functools import partial
from typing import Any

import numpy as np

from ...errors import RefindexError
from ..zarr_store._consolidated import group_document, metadata_of
from ..zarr_store._store import IndexStore

SMALL_ARRAY_BYTES = 16 << 20
TABLE_COLUMN_BYTES = 256 << 20
TABLE_COLUMN_TYPES = frozenset({"VectorData", "VectorIndex", "ElementIdentifiers", "DynamicTableRegion"})
_TREES: "weakref.WeakKeyDictionary[IndexStore, ZarrTree]" = weakref.WeakKeyDictionary()


class ZarrTree:
    """The zarr groups and arrays of one index, made from its consolidated metadata (no store reads)."""

    def __init__(self, store: IndexStore):
        import zarr
        from zarr.core.group import AsyncGroup
        from zarr.storage import StorePath

        raw = store.inline(".zmetadata")
        if raw is None:
            raise RefindexError("the index has no consolidated metadata (.zmetadata)")
        self.store = store
        self.root: Any = zarr.Group(AsyncGroup.from_dict(StorePath(store, ""), group_document(
            metadata_of(json.loads(raw)))))
        self.flat = self.root.metadata.consolidated_metadata.flattened_metadata
        self.children: dict[str, list[str]] = {}
        for path in sorted(self.flat):
            parent, _, name = path.rpartition("/")
            self.children.setdefault(parent, []).append(name)
        self._objects: dict[str, Any] = {"": self.root}
        self._scalars: dict[str, Any] | None = None

    @classmethod
    def of(cls, store: IndexStore) -> "ZarrTree":
        tree = _TREES.get(store)
        if tree is None:
            tree = _TREES[store] = cls(store)
        return tree

    def get(self, path: str) -> Any:
        """The zarr object at ``path`` ("a/b"; "" the root); KeyError when there is none."""
        path = path.strip("/")
        obj = self._objects.get(path)
        if obj is not None:
            return obj
        import zarr
        from zarr.core.array import AsyncArray
        from zarr.core.group import AsyncGroup, GroupMetadata
        from zarr.storage import StorePath

        meta = self.flat[path]
        where = StorePath(self.store, path)
        if isinstance(meta, GroupMetadata):
            obj = zarr.Group(AsyncGroup(metadata=meta, store_path=where))
        else:
            obj = zarr.Array(AsyncArray(metadata=meta, store_path=where))
            self._speed_up(path, obj)
        self._objects[path] = obj
        return obj

    # ------------------------------------------------------------------ arrays served from memory
    def _speed_up(self, path: str, arr: Any) -> None:
        if arr.ndim == 0:
            value = self.scalars().get(path, _MISSING)
            if value is not _MISSING:
                serve_from_memory(arr, lambda: value)
            return
        raw = self._single_inline_chunk(path, arr.metadata)
        if raw is not None:  # decoded here on first read, no trip through zarr
            serve_from_memory(arr, partial(_whole_inline_array, arr.metadata, raw))
            return
        limit = TABLE_COLUMN_BYTES if arr.attrs.get("neurodata_type") in TABLE_COLUMN_TYPES else SMALL_ARRAY_BYTES
        if _decoded_bytes(arr) <= limit:
            serve_from_memory(arr, _whole_array_loader(arr), first_touch=limit == SMALL_ARRAY_BYTES)

    def _single_inline_chunk(self, path: str, meta: Any) -> bytes | None:
        """The inline bytes of a v2 array held in one chunk, or None."""
        if getattr(meta, "zarr_format", None) != 2 or any(-(-s // c) != 1 for s, c in zip(meta.shape, meta.chunks)):
            return None
        key = meta.dimension_separator.join("0" * len(meta.shape)) if meta.shape else "0"
        return self.store.inline(f"{path}/{key}")

    def scalars(self) -> dict[str, Any]:
        """Values of every 0-d array whose one chunk is inline (hdmf reads them all while building).

        Decoded here with the array's own codecs and dtype, as zarr does, instead of one
        trip through zarr's event loop each; a chunk that is not inline, or a value this
        cannot decode, is left to zarr.
        """
        if self._scalars is None:
            self._scalars = {}
            for path, meta in self.flat.items():
                if getattr(meta, "shape", None) != () or getattr(meta, "zarr_format", None) != 2:
                    continue
                raw = self.store.inline(f"{path}/0")
                if raw is not None:
                    try:
                        self._scalars[path] = decode_chunk(meta, raw)[()]
                    except Exception:
                        pass
        return self._scalars


def decode_chunk(meta: Any, raw: bytes) -> np.ndarray:
    """One chunk of a v2 array (``meta``) decoded as zarr decodes it: chunk shape, zarr's dtype."""
    buf: Any = raw
    if meta.compressor is not None:
        buf = meta.compressor.decode(buf)
    for codec in reversed(meta.filters or ()):
        buf = codec.decode(buf)
    dtype = meta.dtype.to_native_dtype()
    if isinstance(buf, np.ndarray) and buf.dtype == object:  # vlen-utf8 / vlen-bytes
        values = buf if dtype.kind == "O" else buf.astype(dtype)
    else:
        values = np.frombuffer(memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf, dtype=dtype)
    if values.size != int(np.prod(meta.chunks, dtype=np.int64)):
        raise ValueError("the chunk holds another number of elements than its shape")
    return values.reshape(meta.chunks)


def _whole_inline_array(meta: Any, raw: bytes) -> np.ndarray:
    """``a[...]`` of an array held in one inline chunk (the chunk may be larger than the array)."""
    return decode_chunk(meta, raw)[tuple(slice(0, n) for n in meta.shape)]


_MISSING = object()


def _decoded_bytes(arr: Any) -> int:
    """Bytes ``arr`` takes in memory once read (object/string arrays: a generous estimate)."""
    itemsize = arr.dtype.itemsize if arr.dtype.kind not in "OT" else 64
    return int(np.prod(arr.shape, dtype=np.float64)) * max(1, itemsize)


def _whole_array_loader(arr: Any):
    from zarr import Array

    return partial(Array.get_basic_selection, arr, Ellipsis)


def serve_from_memory(arr: Any, load, first_touch: bool = False) -> None:
    """Serve ``arr``'s basic and single-axis orthogonal selections from ``load()``'s values.

    The values are what zarr itself returned for the whole array, indexed as zarr would.
    ``first_touch``: the first read still goes through zarr for just its selection; the
    whole array is loaded when it is read again.
    """
    from zarr import Array

    state: dict[str, Any] = {"touched": not first_touch}

    def values() -> Any:
        if "values" not in state:
            if not state["touched"]:
                state["touched"] = True
                return None
            state["values"] = load()
        return state["values"]

    def basic(selection: Any = Ellipsis, *, out: Any = None, prototype: Any = None, fields: Any = None) -> Any:
        if out is None and prototype is None and not fields:  # zarr passes [] for "no fields"
            v = values()
            if v is not None:
                return _index(v, selection)
        return Array.get_basic_selection(arr, selection, out=out, prototype=prototype, fields=fields or None)

    def orthogonal(selection: Any, *, out: Any = None, fields: Any = None, prototype: Any = None) -> Any:
        sel = selection if isinstance(selection, tuple) else (selection,)
        if out is None and prototype is None and not fields and _one_fancy_axis(sel):
            v = values()
            if v is not None:
                return _index(v, tuple(np.asarray(s) if isinstance(s, list) else s for s in sel))
        return Array.get_orthogonal_selection(arr, selection, out=out, fields=fields or None, prototype=prototype)

    arr.get_basic_selection = basic
    arr.get_orthogonal_selection = orthogonal


def _one_fancy_axis(sel: tuple) -> bool:
    """At most one axis indexed by a list/array (then numpy's fancy indexing is zarr's orthogonal one)."""
    fancy = 0
    for s in sel:
        if s is Ellipsis:
            return False
        if isinstance(s, (list, np.ndarray)):
            a = np.asarray(s)
            if a.ndim != 1 or a.dtype.kind not in "iub":
                return False
            fancy += 1
    return fancy <= 1


def _index(values: Any, selection: Any) -> Any:
    """``values[selection]`` as zarr returns it: a new array (never a view of the values kept here),
    0-d where numpy would give a scalar."""
    if not isinstance(values, np.ndarray):  # a 0-d array read whole: zarr returns the scalar itself
        return values
    sel = selection if isinstance(selection, tuple) else (selection,)
    if not any(s is Ellipsis for s in sel):
        sel = sel + (Ellipsis,)
    return values[sel].copy()
